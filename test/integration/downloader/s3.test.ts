// `mlmodel download` from s3:// against moto's real S3 server on loopback (path-style, custom
// endpoint, keys from env and from mounted files, web identity through STS).
// test-needs: moto
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CreateBucketCommand, HeadObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { completionMarkerName } from "../../../src/downloader/contract.ts";
import {
  freePort,
  httpAnswers,
  motoBinary,
  randomBytes,
  runDownload,
  type Started,
  seedPartial,
  startProcess,
  tempDir,
} from "./servers.ts";

describe("s3:// downloads (moto server)", () => {
  let moto: Started;
  let work: string;
  let env: Record<string, string>;
  let etag = "";
  const bigKey = "resnet/1/variables/variables.data-00000-of-00001";
  const objects: Record<string, Buffer> = {
    "resnet/1/saved_model.pb": randomBytes(200_000, 2),
    "resnet/1/variables/variables.data-00000-of-00001": randomBytes(2_500_000, 3),
    "resnet/1/variables/variables.index": randomBytes(1_000, 4),
    "resnet-other/decoy.bin": randomBytes(10, 5),
  };

  before(async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    moto = await startProcess(motoBinary(), ["-H", "127.0.0.1", "-p", String(port)], url, httpAnswers);
    env = {
      AWS_ACCESS_KEY_ID: "test",
      AWS_SECRET_ACCESS_KEY: "test",
      AWS_REGION: "us-east-1",
      AWS_ENDPOINT_URL_S3: url,
      MLMODEL_S3_FORCE_PATH_STYLE: "true",
    };
    const s3 = new S3Client({
      region: "us-east-1",
      endpoint: url,
      forcePathStyle: true,
      credentials: { accessKeyId: "test", secretAccessKey: "test" },
    });
    await s3.send(new CreateBucketCommand({ Bucket: "models" }));
    for (const [Key, Body] of Object.entries(objects))
      await s3.send(new PutObjectCommand({ Bucket: "models", Key, Body }));
    etag = (await s3.send(new HeadObjectCommand({ Bucket: "models", Key: bigKey }))).ETag!;
    s3.destroy();
    work = tempDir("s3");
  });
  after(() => moto?.stop());

  it("downloads every object under a prefix, and only those", async () => {
    const dest = join(work, "prefix");
    const res = await runDownload(["--uri", "s3://models/resnet", "--dest", dest], env);
    assert.equal(res.code, 0, res.stderr);
    for (const [key, body] of Object.entries(objects)) {
      if (!key.startsWith("resnet/")) continue;
      assert.deepEqual(readFileSync(join(dest, key.slice("resnet/".length))), body, key);
    }
    const listed = execFileSync("find", [dest, "-type", "f", "-printf", "%P\n"])
      .toString()
      .trim()
      .split("\n")
      .sort();
    assert.deepEqual(listed, [
      completionMarkerName,
      "1/saved_model.pb",
      "1/variables/variables.data-00000-of-00001",
      "1/variables/variables.index",
    ]);
  });

  it("records the tree digest that the documented shell pipeline prints, and accepts it as --sha256", async () => {
    const dest = join(work, "prefix");
    const marker = JSON.parse(readFileSync(join(dest, completionMarkerName), "utf8"));
    assert.equal(marker.digestOf, "tree");
    assert.equal(marker.files, 3);
    const shell = execFileSync(
      "bash",
      [
        "-c",
        `find . -type f ! -name ${completionMarkerName} -printf '%P\\n' | LC_ALL=C sort | xargs sha256sum | sha256sum`,
      ],
      { cwd: dest },
    )
      .toString()
      .split(" ")[0];
    assert.equal(marker.sha256, shell);
    const again = await runDownload(
      ["--uri", "s3://models/resnet/", "--dest", join(work, "verified"), "--sha256", shell!],
      env,
    );
    assert.equal(again.code, 0, again.stderr);
  });

  it("downloads a single object, keys read from the mounted credentials directory", async () => {
    const creds = join(work, "creds");
    mkdirSync(creds);
    writeFileSync(join(creds, "AWS_ACCESS_KEY_ID"), "test\n");
    writeFileSync(join(creds, "AWS_SECRET_ACCESS_KEY"), "test\n");
    const dest = join(work, "single");
    const res = await runDownload(["--uri", "s3://models/resnet/1/saved_model.pb", "--dest", dest], {
      AWS_ENDPOINT_URL_S3: env.AWS_ENDPOINT_URL_S3,
      MLMODEL_S3_FORCE_PATH_STYLE: "true",
      MLMODEL_CREDENTIALS_DIR: creds,
      AWS_ACCESS_KEY_ID: "",
      AWS_SECRET_ACCESS_KEY: "",
    });
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(dest, "saved_model.pb")), objects["resnet/1/saved_model.pb"]);
  });

  it("names a missing bucket as NotFound", async () => {
    const res = await runDownload(["--uri", "s3://no-such-bucket/x/", "--dest", join(work, "nobucket")], env);
    assert.equal(res.code, 1);
    assert.match(
      res.stderr,
      /^s3:\/\/no-such-bucket\/x\/: NotFound: bucket no-such-bucket does not exist; check the URI$/m,
    );
  });

  it("fails an empty prefix as NotFound", async () => {
    const res = await runDownload(["--uri", "s3://models/nothing-here/", "--dest", join(work, "empty")], env);
    assert.equal(res.code, 1);
    assert.match(res.stderr, /NotFound: no object at this URI or under this prefix/);
  });

  it("gets credentials by web identity (AWS_ROLE_ARN + token file) through the SDK's default chain", async () => {
    const token = join(work, "web-identity-token");
    writeFileSync(token, "eyJhbGciOiJub25lIn0.eyJzdWIiOiJtbG1vZGVsIn0.");
    const dest = join(work, "web-identity");
    // No keys, no shared files, no instance metadata: web identity is the only way in.
    const noKeys = {
      AWS_ACCESS_KEY_ID: "",
      AWS_SECRET_ACCESS_KEY: "",
      AWS_SHARED_CREDENTIALS_FILE: join(work, "none"),
      AWS_CONFIG_FILE: join(work, "none"),
      AWS_EC2_METADATA_DISABLED: "true",
      AWS_REGION: "us-east-1",
      AWS_ENDPOINT_URL_S3: env.AWS_ENDPOINT_URL_S3!,
      AWS_ENDPOINT_URL_STS: env.AWS_ENDPOINT_URL_S3!,
      MLMODEL_S3_FORCE_PATH_STYLE: "true",
    };
    const uri = "s3://models/resnet/1/variables/variables.index";
    const without = await runDownload(["--uri", uri, "--dest", dest, "--retries", "1"], noKeys);
    assert.equal(without.code, 1, "without web identity there are no credentials");
    assert.match(without.stderr, /: AccessDenied: Could not load credentials.*; check AWS_ACCESS_KEY_ID/);
    const res = await runDownload(["--uri", uri, "--dest", dest], {
      ...noKeys,
      AWS_ROLE_ARN: "arn:aws:iam::123456789012:role/model-reader",
      AWS_WEB_IDENTITY_TOKEN_FILE: token,
    });
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(
      readFileSync(join(dest, "variables.index")),
      objects["resnet/1/variables/variables.index"],
    );
  });

  // A part on disk whose bytes differ from the object makes resume visible: resumed, the
  // marked bytes stay; restarted, the file comes out whole and right.
  it("resumes a partial object with a Range request when its ETag still matches", async () => {
    const dest = join(work, "resume");
    const uri = `s3://models/${bigKey}`;
    const body = objects[bigKey]!;
    seedPartial(dest, uri, "variables.data-00000-of-00001", Buffer.alloc(1000, 0xee), etag);
    const res = await runDownload(["--uri", uri, "--dest", dest], env);
    assert.equal(res.code, 0, res.stderr);
    const got = readFileSync(join(dest, "variables.data-00000-of-00001"));
    assert.equal(got.length, body.length);
    assert.deepEqual(
      got.subarray(0, 1000),
      Buffer.alloc(1000, 0xee),
      "the first 1000 bytes came from the part",
    );
    assert.deepEqual(got.subarray(1000), body.subarray(1000), "the rest from a ranged GET");
  });

  it("restarts a partial object whose ETag changed (If-Match -> 412)", async () => {
    const dest = join(work, "restart");
    const uri = `s3://models/${bigKey}`;
    seedPartial(dest, uri, "variables.data-00000-of-00001", Buffer.alloc(1000, 0xee), '"stale-etag"');
    const res = await runDownload(["--uri", uri, "--dest", dest], env);
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(dest, "variables.data-00000-of-00001")), objects[bigKey]);
  });
});
