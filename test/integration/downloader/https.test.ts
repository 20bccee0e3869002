// `mlmodel download` against a real HTTPS server on loopback with its own CA: auth, redirects,
// retries, resume after a cut and after a kill, checksum failures, atomic publish, re-run.
// test-needs: openssl
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { completionMarkerName, partialDirFor } from "../../../src/downloader/contract.ts";
import { makeArchive } from "../../unit/downloader/archive-fixtures.ts";
import { FileServer } from "./file-server.ts";
import { makeCertificates, randomBytes, runDownload, tempDir } from "./servers.ts";

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

describe("https:// downloads", () => {
  const pki = makeCertificates();
  const server = new FileServer({ tls: { key: pki.key, cert: pki.cert }, bearerToken: "s3cret" });
  const model = randomBytes(3 * 1024 * 1024 + 17);
  const env = { MLMODEL_CA_BUNDLE: pki.caFile, MLMODEL_HTTP_BEARER_TOKEN: "s3cret" };
  let work: string;

  before(async () => {
    await server.start();
    server.files.set("/models/model.bin", model);
    server.routes.push((req, res) => {
      if (req.url !== "/old/model.bin") return false;
      res.writeHead(302, { location: "/models/model.bin" }).end();
      return true;
    });
    work = tempDir("https");
  });
  after(() => server.stop());

  it("downloads with the custom CA and a bearer token, then a re-run exits at once", async () => {
    const dest = join(work, "plain");
    const uri = `${server.url}/models/model.bin`;
    const first = await runDownload(["--uri", uri, "--dest", dest, "--sha256", sha256(model)], env);
    assert.equal(first.code, 0, first.stderr);
    assert.deepEqual(readFileSync(join(dest, "model.bin")), model);
    const marker = JSON.parse(readFileSync(join(dest, completionMarkerName), "utf8"));
    assert.equal(marker.sha256, sha256(model));
    assert.equal(marker.digestOf, "file");
    assert.equal(marker.uri, uri);
    assert.equal(existsSync(partialDirFor(dest)), false, "the partial directory is gone after publish");

    const before = server.fileRequests("/models/model.bin").length;
    const second = await runDownload(["--uri", uri, "--dest", dest], env);
    assert.equal(second.code, 0, second.stderr);
    assert.match(second.stderr, /already complete/);
    assert.equal(server.fileRequests("/models/model.bin").length, before, "no request on a complete re-run");
  });

  it("follows a redirect", async () => {
    const dest = join(work, "redirected");
    const res = await runDownload(["--uri", `${server.url}/old/model.bin`, "--dest", dest], env);
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(dest, "model.bin")), model);
  });

  it("refuses a server whose CA is not configured, naming the fix", async () => {
    const dest = join(work, "no-ca");
    const log = join(work, "no-ca.termination-log");
    const res = await runDownload(
      ["--uri", `${server.url}/models/model.bin`, "--dest", dest, "--retries", "1"],
      {
        MLMODEL_HTTP_BEARER_TOKEN: "s3cret",
        MLMODEL_TERMINATION_LOG: log,
      },
    );
    assert.equal(res.code, 1);
    const line = readFileSync(log, "utf8").trim();
    assert.match(line, new RegExp(`^${server.url}/models/model.bin: TLSError: .*ca\\.crt`));
    assert.equal(existsSync(dest), false);
  });

  it("exits 2 on bad flags with one InvalidArgument line in the termination log (the Job fails at once)", async () => {
    const log = join(work, "usage.termination-log");
    const res = await runDownload(
      ["--uri", `${server.url}/models/model.bin`, "--dest", join(work, "usage"), "--parallel", "lots"],
      { MLMODEL_TERMINATION_LOG: log },
    );
    assert.equal(res.code, 2, res.stderr);
    assert.equal(
      readFileSync(log, "utf8"),
      `${server.url}/models/model.bin: InvalidArgument: --parallel "lots" must be a whole number of at least 1; check the download Job's args (mlmodel download --help)\n`,
    );
    assert.equal(existsSync(join(work, "usage")), false);
  });

  it("fails at once on 401 with a hint about the credentials", async () => {
    const log = join(work, "401.log");
    const count = server.fileRequests("/models/model.bin").length;
    const res = await runDownload(["--uri", `${server.url}/models/model.bin`, "--dest", join(work, "401")], {
      MLMODEL_CA_BUNDLE: pki.caFile,
      MLMODEL_HTTP_BEARER_TOKEN: "wrong",
      MLMODEL_CREDENTIALS_SECRET: "model-creds",
      MLMODEL_TERMINATION_LOG: log,
    });
    assert.equal(res.code, 1);
    assert.match(
      readFileSync(log, "utf8"),
      /: AccessDenied: .*HTTP 401.*check MLMODEL_HTTP_BEARER_TOKEN or MLMODEL_HTTP_HEADERS in Secret model-creds/,
    );
    assert.equal(server.fileRequests("/models/model.bin").length, count + 1, "a 401 is not retried");
  });

  it("fails at once on 404 (not transient)", async () => {
    const res = await runDownload(
      ["--uri", `${server.url}/models/missing.bin`, "--dest", join(work, "404")],
      env,
    );
    assert.equal(res.code, 1);
    assert.match(res.stderr, /missing\.bin: NotFound: /);
    assert.equal(server.fileRequests("/models/missing.bin").length, 1);
  });

  it("retries 503s with backoff and succeeds", async () => {
    server.faults = { fail503: 2 };
    const count = server.fileRequests("/models/model.bin").length;
    const res = await runDownload(
      ["--uri", `${server.url}/models/model.bin`, "--dest", join(work, "503")],
      env,
    );
    server.faults = {};
    assert.equal(res.code, 0, res.stderr);
    assert.equal(server.fileRequests("/models/model.bin").length, count + 3);
    assert.match(res.stderr, /HTTP 503; retry 1/);
  });

  it("resumes with a Range request after the connection is cut mid-body", async () => {
    server.faults = { cutAfterBytes: 1_000_000, cutTimes: 1 };
    const count = server.fileRequests("/models/model.bin").length;
    const dest = join(work, "cut");
    const res = await runDownload(
      ["--uri", `${server.url}/models/model.bin`, "--dest", dest, "--sha256", sha256(model)],
      env,
    );
    server.faults = {};
    assert.equal(res.code, 0, res.stderr);
    const reqs = server.fileRequests("/models/model.bin").slice(count);
    assert.equal(reqs.length, 2);
    assert.match(reqs[1]!.headers.range ?? "", /^bytes=\d+-$/);
    assert.ok(Number(/\d+/.exec(reqs[1]!.headers.range!)![0]) > 0, "resumed past byte 0");
    assert.ok(reqs[1]!.headers["if-range"], "resume is conditional on the ETag");
    assert.deepEqual(readFileSync(join(dest, "model.bin")), model);
  });

  it("resumes after the downloader is killed mid-file, and the result verifies", async () => {
    server.faults = { bytesPerSecond: 1024 * 1024 };
    const dest = join(work, "killed");
    const part = join(partialDirFor(dest), "download", "model.bin.mlmodel-part");
    const args = ["--uri", `${server.url}/models/model.bin`, "--dest", dest, "--sha256", sha256(model)];
    const first = runDownload(args, env);
    while (!existsSync(part) || statSync(part).size < 300_000) {
      if (first.child.exitCode !== null)
        assert.fail(`the first run ended before it could be killed: ${(await first).stderr}`);
      await sleep(50);
    }
    first.child.kill("SIGKILL");
    await first;
    assert.equal(existsSync(dest), false, "a killed download publishes nothing");
    const partial = statSync(part).size;
    server.faults = {};
    const count = server.fileRequests("/models/model.bin").length;
    const second = await runDownload(args, env);
    assert.equal(second.code, 0, second.stderr);
    const resumed = server.fileRequests("/models/model.bin").slice(count);
    assert.equal(resumed.length, 1);
    assert.equal(resumed[0]!.headers.range, `bytes=${partial}-`);
    assert.deepEqual(readFileSync(join(dest, "model.bin")), model);
  });

  it("fails a corrupted file on its checksum, publishes nothing and keeps no bad bytes", async () => {
    const dest = join(work, "corrupt");
    const log = join(work, "corrupt.log");
    const wrong = sha256(Buffer.from("something else"));
    const res = await runDownload(
      ["--uri", `${server.url}/models/model.bin`, "--dest", dest, "--sha256", wrong],
      {
        ...env,
        MLMODEL_TERMINATION_LOG: log,
      },
    );
    assert.equal(res.code, 1);
    const line = readFileSync(log, "utf8").trim();
    assert.equal(line.split("\n").length, 1, "one line");
    assert.match(
      line,
      new RegExp(`: ChecksumMismatch: model.bin has sha256 ${sha256(model)}, expected ${wrong}`),
    );
    assert.equal(existsSync(dest), false);
    assert.equal(existsSync(partialDirFor(dest)), false);
  });

  it("unpacks a .tar.gz model and records it in the marker", async () => {
    server.files.set("/models/saved.tar.gz", readFileSync(makeArchive(work, "good-tgz")));
    const dest = join(work, "unpacked");
    const res = await runDownload(["--uri", `${server.url}/models/saved.tar.gz`, "--dest", dest], env);
    assert.equal(res.code, 0, res.stderr);
    assert.equal(readFileSync(join(dest, "model/saved_model.pb"), "utf8"), "pb".repeat(1000));
    assert.equal(existsSync(join(dest, "saved.tar.gz")), false, "the archive itself is not published");
    assert.equal(JSON.parse(readFileSync(join(dest, completionMarkerName), "utf8")).extracted, true);
  });

  it("refuses a malicious archive and publishes nothing", async () => {
    server.files.set("/models/evil.tar.gz", readFileSync(makeArchive(work, "traversal-tgz")));
    const dest = join(work, "evil");
    const log = join(work, "evil.log");
    const res = await runDownload(["--uri", `${server.url}/models/evil.tar.gz`, "--dest", dest], {
      ...env,
      MLMODEL_TERMINATION_LOG: log,
    });
    assert.equal(res.code, 1);
    assert.match(
      readFileSync(log, "utf8"),
      /evil\.tar\.gz: UnsafeArchive: archive entry "\.\.\/evil\.txt" climbs out/,
    );
    assert.equal(existsSync(dest), false);
    assert.equal(existsSync(partialDirFor(dest)), false);
    assert.equal(existsSync(join(work, "evil.txt")), false);
  });

  it("replaces an earlier model in DEST but never a directory of other files", async () => {
    const dest = join(work, "plain"); // holds the first test's model and marker
    server.files.set("/models/v2.bin", Buffer.from("version 2"));
    const replaced = await runDownload(["--uri", `${server.url}/models/v2.bin`, "--dest", dest], env);
    assert.equal(replaced.code, 0, replaced.stderr);
    assert.deepEqual(readdirSync(dest).sort(), [completionMarkerName, "v2.bin"]);

    const foreign = join(work, "foreign");
    mkdirSync(foreign);
    writeFileSync(join(foreign, "notes.txt"), "mine");
    const refused = await runDownload(["--uri", `${server.url}/models/v2.bin`, "--dest", foreign], env);
    assert.equal(refused.code, 1);
    assert.match(
      refused.stderr,
      /InvalidArgument: --dest ".*foreign" is not empty and holds no \.mlmodel-complete\.json/,
    );
    assert.equal(readFileSync(join(foreign, "notes.txt"), "utf8"), "mine");
  });

  it("names the flag, the value and the right form on bad input", async () => {
    const bad = await runDownload(["--uri", "ftp://x/y", "--dest", join(work, "bad")], env);
    assert.equal(bad.code, 1);
    assert.match(
      bad.stderr,
      /InvalidArgument: --uri "ftp:\/\/x\/y": scheme "ftp" is not supported; expected one of: https:\/\//,
    );
    const sha = await runDownload(
      ["--uri", `${server.url}/m`, "--dest", join(work, "bad"), "--sha256", "xyz"],
      env,
    );
    assert.match(sha.stderr, /--sha256 "xyz" is not a sha256 digest; expected 64 hexadecimal characters/);
    const size = await runDownload(
      ["--uri", `${server.url}/m`, "--dest", join(work, "bad"), "--max-size", "lots"],
      env,
    );
    assert.equal(size.code, 2);
    assert.match(size.stderr, /--max-size "lots" is not a size; expected e.g. 500Mi/);
    assert.deepEqual(readdirSync(work).includes("bad"), false);
  });
});
