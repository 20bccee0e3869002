// `mlmodel download` of a pre-signed URL, against a real HTTPS server on loopback that answers
// only with the signature: the download uses the exact URI (from the environment, as the Job
// passes it), and nothing it prints or leaves on the volume holds the signature.
// test-needs: openssl
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { completionMarkerName, partialDirFor } from "../../../src/downloader/contract.ts";
import { FileServer } from "./file-server.ts";
import { makeCertificates, randomBytes, runDownload, seedPartial, tempDir } from "./servers.ts";

const canary = `canary${Date.now().toString(36)}x${Math.random().toString(36).slice(2)}`;
const credential = `AKIAEXAMPLE/20250101/us-east-1/s3/aws4_request/${canary}`;

/** Every file under `dir`, as text. */
function filesText(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => readFileSync(join(e.parentPath, e.name), "utf8"))
    .join("\n");
}

describe("a pre-signed URL", () => {
  const pki = makeCertificates();
  const server = new FileServer({ tls: { key: pki.key, cert: pki.cert } });
  const model = randomBytes(256 * 1024 + 3);
  const signedQueries: string[] = [];
  let work: string;
  let signed: string;

  before(async () => {
    await server.start();
    // Like S3: the object only for the right signature; the refusal quotes the request.
    server.routes.push((req, res) => {
      const url = new URL(req.url ?? "/", server.url);
      if (url.pathname !== "/bucket/model.bin") return false;
      if (url.searchParams.get("X-Amz-Signature") !== canary) {
        res.writeHead(403).end(`<Error>SignatureDoesNotMatch for ${req.url}</Error>`);
        return true;
      }
      signedQueries.push(url.search);
      res.writeHead(200, { "content-length": model.length }).end(model);
      return true;
    });
    work = tempDir("signed-url");
    signed = `${server.url}/bucket/model.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=${encodeURIComponent(credential)}&X-Amz-Signature=${canary}`;
  });
  after(() => server.stop());

  const env = (extra: Record<string, string>) => ({ MLMODEL_CA_BUNDLE: pki.caFile, ...extra });

  it("downloads from --uri-from-env with the full URI, and shows it only redacted", async () => {
    const dest = join(work, "model");
    const log = join(work, "ok.termination-log");
    const res = await runDownload(
      ["--uri-from-env", "MLMODEL_URI", "--dest", dest],
      env({ MLMODEL_URI: signed, MLMODEL_TERMINATION_LOG: log }),
    );
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(dest, "model.bin")), model);
    assert.ok(signedQueries.length >= 1, "the server saw the signature: the exact URI was used");
    assert.match(res.stderr, /X-Amz-Signature=REDACTED/);
    const marker = JSON.parse(readFileSync(join(dest, completionMarkerName), "utf8"));
    assert.match(
      marker.uri,
      /\?X-Amz-Algorithm=REDACTED&X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED$/,
    );
    assert.match(marker.uriSha256, /^[0-9a-f]{64}$/);
    for (const [where, text] of Object.entries({
      stderr: res.stderr,
      stdout: res.stdout,
      volume: filesText(work),
    }))
      assert.ok(!text.includes(canary), `the signature leaked into ${where}`);

    // The marker still recognises the same exact URI (by digest): a re-run does nothing.
    const before = signedQueries.length;
    const again = await runDownload(
      ["--uri-from-env", "MLMODEL_URI", "--dest", dest],
      env({ MLMODEL_URI: signed }),
    );
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /already complete/);
    assert.equal(signedQueries.length, before);
  });

  it("a refused signature fails with the URI redacted in stderr and the termination log", async () => {
    const wrong = signed.replace(`X-Amz-Signature=${canary}`, `X-Amz-Signature=${canary}0`);
    const log = join(work, "denied.termination-log");
    const res = await runDownload(
      ["--uri", wrong, "--dest", join(work, "denied"), "--retries", "1"],
      env({ MLMODEL_TERMINATION_LOG: log }),
    );
    assert.equal(res.code, 1);
    const line = readFileSync(log, "utf8");
    assert.match(
      line,
      /^https:\/\/127\.0\.0\.1:\d+\/bucket\/model\.bin\?X-Amz-Algorithm=REDACTED&.*: AccessDenied: /,
    );
    for (const text of [line, res.stderr, res.stdout]) assert.ok(!text.includes(canary), text);
  });

  it("a partial download an older downloader recorded with the exact URI resumes", async () => {
    const dest = join(work, "resumed");
    seedPartial(dest, signed, "model.bin", model.subarray(0, 1000), "unknown");
    const res = await runDownload(["--uri-from-env", "U", "--dest", dest], env({ U: signed }));
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stderr, /resuming the partial download/);
    assert.deepEqual(readFileSync(join(dest, "model.bin")), model);
    assert.ok(!filesText(dest).includes(canary));
    assert.throws(() => readdirSync(partialDirFor(dest)), "the partial directory is gone");
  });

  it("--uri-from-env of an unset variable is a usage error that names the variable", async () => {
    const log = join(work, "unset.termination-log");
    const res = await runDownload(
      ["--uri-from-env", "MLMODEL_URI", "--dest", join(work, "unset")],
      env({ MLMODEL_TERMINATION_LOG: log }),
    );
    assert.equal(res.code, 2);
    assert.match(res.stderr, /environment variable MLMODEL_URI is not set or empty/);
    assert.match(readFileSync(log, "utf8"), /InvalidArgument/);
  });

  it("a user name or password before the host is refused, and not shown", async () => {
    const log = join(work, "userinfo.termination-log");
    const res = await runDownload(
      [
        "--uri",
        `${server.url.replace("https://", `https://user:${canary}@`)}/bucket/model.bin`,
        "--dest",
        join(work, "u"),
      ],
      env({ MLMODEL_TERMINATION_LOG: log }),
    );
    assert.equal(res.code, 1);
    const line = readFileSync(log, "utf8");
    assert.match(
      line,
      /InvalidArgument: .*user name or password before the host is never sent.*MLMODEL_HTTP_BEARER_TOKEN/,
    );
    for (const text of [line, res.stderr]) assert.ok(!text.includes(canary), text);
  });
});
