// Downloads that cannot hang and listings that cannot spin, against real servers of the test's
// own on loopback: one that accepts every request and never answers, one that sends the headers
// and a few bytes and then nothing, and listings that page for ever (HF, GCS, S3, Azure). Each
// store's client must give up after its bound, retry as told, and fail with a line that names
// the bound, its value and the flag that sets it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { runDownload, tempDir } from "./servers.ts";

/** A node:http server on loopback that records each request and lets `handle` answer (or not). */
class TinyServer {
  readonly requests: string[] = [];
  url = "";
  private readonly server: http.Server;
  constructor(handle: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
    this.server = http.createServer((req, res) => {
      this.requests.push(`${req.method} ${req.url}`);
      handle(req, res);
    });
  }
  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }
  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** An S3 client's settings for a test server (path-style, any keys). */
function s3Env(endpoint: string): Record<string, string> {
  return {
    AWS_ACCESS_KEY_ID: "test",
    AWS_SECRET_ACCESS_KEY: "test",
    AWS_REGION: "us-east-1",
    AWS_ENDPOINT_URL_S3: endpoint,
    MLMODEL_S3_FORCE_PATH_STYLE: "true",
  };
}

// A hang guard only: without a bound the download never ends, and the test must fail, not hang.
const hangGuard = { timeout: 120_000 };
// Short, yet long enough that a loaded machine still answers the servers' quick replies in time.
const timeoutSeconds = 2;
const attempts = 2;

describe("a server that accepts and never answers", () => {
  const silent = new TinyServer(() => {});
  // Headers and the first bytes of a 1 MB body, then silence.
  const stalling = new TinyServer((req, res) => {
    if (req.method === "HEAD") return void res.writeHead(200, { "content-length": 1_000_000 }).end();
    res.writeHead(200, { "content-length": 1_000_000 });
    res.write(Buffer.alloc(1000, 7));
  });
  // Blob storage that lists one blob, then sends its first bytes and nothing more: only the
  // download's own idle guard bounds this body (the Azure SDK's timeout ends at the headers).
  const blobListing = `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="models"><Prefix>resnet/</Prefix><Blobs><Blob><Name>resnet/m.bin</Name><Properties><Content-Length>1000000</Content-Length><Etag>0x8DC0FFEE</Etag><Last-Modified>Wed, 01 Jan 2025 00:00:00 GMT</Last-Modified><BlobType>BlockBlob</BlobType></Properties></Blob></Blobs><NextMarker /></EnumerationResults>`;
  const azureStalling = new TinyServer((req, res) => {
    if (new URL(req.url ?? "/", "http://x").searchParams.get("comp") === "list") {
      return void res.writeHead(200, { "content-type": "application/xml" }).end(blobListing);
    }
    res.writeHead(200, {
      "content-length": 1_000_000,
      "x-ms-blob-type": "BlockBlob",
      etag: "0x8DC0FFEE",
      "last-modified": "Wed, 01 Jan 2025 00:00:00 GMT",
    });
    res.write(Buffer.alloc(1000, 7));
  });
  let work: string;

  before(async () => {
    await silent.start();
    await stalling.start();
    await azureStalling.start();
    work = tempDir("bounds");
  });
  after(async () => {
    await silent.stop();
    await stalling.stop();
    await azureStalling.stop();
  });

  /** Runs the downloader against a silent store; returns its termination line and how long it took. */
  async function timesOut(name: string, uri: string, env: Record<string, string>) {
    const log = join(work, `${name}.termination-log`);
    const started = performance.now();
    const res = await runDownload(
      [
        "--uri",
        uri,
        "--dest",
        join(work, name),
        "--request-timeout",
        String(timeoutSeconds),
        "--retries",
        String(attempts),
      ],
      { ...env, MLMODEL_TERMINATION_LOG: log },
    );
    const seconds = (performance.now() - started) / 1000;
    assert.equal(res.code, 1, res.stderr);
    const line = readFileSync(log, "utf8").trim();
    assert.match(
      line,
      new RegExp(`NetworkError: .*no answer within ${timeoutSeconds}s \\(the request timeout\\)`),
      line,
    );
    assert.match(line, /--request-timeout/, "names the flag that sets the bound");
    // Each attempt waited for its bound before giving up (a ratio, not a limit): at least the bound.
    assert.ok(seconds / (attempts * timeoutSeconds) >= 1, `${seconds}s for ${attempts} attempts`);
    return line;
  }

  it("https:// (undici): gives up on the response headers", hangGuard, async () => {
    const before = silent.requests.length;
    await timesOut("http-headers", `${silent.url}/models/m.bin`, {});
    assert.equal(silent.requests.length - before, attempts);
  });

  it("https:// (undici): gives up on a body that stops", hangGuard, async () => {
    const before = stalling.requests.length;
    const line = await timesOut("http-body", `${stalling.url}/models/m.bin`, {});
    assert.match(line, /m\.bin/, "names the file it was reading");
    assert.equal(stalling.requests.length - before, attempts);
  });

  it("s3:// (AWS SDK): gives up on a silent endpoint", hangGuard, async () => {
    const before = silent.requests.length;
    await timesOut("s3", "s3://models/resnet/m.bin", s3Env(silent.url));
    assert.equal(silent.requests.length - before, attempts);
  });

  it("s3:// (AWS SDK): gives up on a body that stops", hangGuard, async () => {
    const before = stalling.requests.length;
    await timesOut("s3-body", "s3://models/resnet/m.bin", s3Env(stalling.url));
    // One HEAD (the key names an object), then one GET per attempt.
    assert.equal(stalling.requests.length - before, 1 + attempts);
  });

  it("azblob:// (Azure SDK): gives up on a silent endpoint", hangGuard, async () => {
    const before = silent.requests.length;
    await timesOut("azure", "azblob://acct/models/resnet/", { AZURE_STORAGE_BLOB_ENDPOINT: silent.url });
    assert.equal(silent.requests.length - before, attempts);
  });

  it("azblob:// (Azure SDK): gives up on a body that stops", hangGuard, async () => {
    const line = await timesOut("azure-body", "azblob://acct/models/resnet/", {
      AZURE_STORAGE_BLOB_ENDPOINT: azureStalling.url,
    });
    assert.match(line, /reading m\.bin/, line);
    // One listing, then one GET per attempt.
    assert.equal(azureStalling.requests.length, 1 + attempts);
  });
});

describe("a listing that pages for ever", () => {
  const maxPages = 20;
  const commit = "0123456789abcdef0123456789abcdef01234567";
  let sameCursor = false;
  const hub = new TinyServer((req, res) => {
    const url = new URL(req.url ?? "/", hub.url);
    const json = (value: unknown, headers: Record<string, string> = {}) =>
      res.writeHead(200, { "content-type": "application/json", ...headers }).end(JSON.stringify(value));
    if (url.pathname.endsWith("/revision/main")) return json({ sha: commit });
    const cursor = Number(url.searchParams.get("cursor") ?? 0);
    url.searchParams.set("cursor", String(sameCursor ? 1 : cursor + 1));
    json([], { link: `<${url.href}>; rel="next"` });
  });
  const gcs = new TinyServer((req, res) => {
    const url = new URL(req.url ?? "/", gcs.url);
    const token = Number(url.searchParams.get("pageToken") ?? 0);
    res
      .writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ items: [], nextPageToken: String(token + 1) }));
  });
  // ListObjectsV2 that is always truncated, each page naming the next.
  const s3 = new TinyServer((req, res) => {
    const token = Number(new URL(req.url ?? "/", "http://x").searchParams.get("continuation-token") ?? 0);
    res
      .writeHead(200, { "content-type": "application/xml" })
      .end(
        `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>models</Name><Prefix>endless/</Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>${token + 1}</NextContinuationToken></ListBucketResult>`,
      );
  });
  // List Blobs that always has a next marker.
  const azure = new TinyServer((req, res) => {
    const marker = Number(new URL(req.url ?? "/", "http://x").searchParams.get("marker") ?? 0);
    res
      .writeHead(200, { "content-type": "application/xml" })
      .end(
        `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="models"><Prefix>endless/</Prefix><Blobs /><NextMarker>${marker + 1}</NextMarker></EnumerationResults>`,
      );
  });
  let work: string;

  before(async () => {
    await hub.start();
    await gcs.start();
    await s3.start();
    await azure.start();
    work = tempDir("pages");
  });
  after(async () => {
    await hub.stop();
    await gcs.stop();
    await s3.stop();
    await azure.stop();
  });

  async function spins(name: string, uri: string, env: Record<string, string>): Promise<string> {
    const log = join(work, `${name}.termination-log`);
    const res = await runDownload(
      ["--uri", uri, "--dest", join(work, name), "--max-list-pages", String(maxPages), "--retries", "1"],
      { ...env, MLMODEL_TERMINATION_LOG: log },
    );
    assert.equal(res.code, 1, res.stderr);
    return readFileSync(log, "utf8").trim();
  }

  it("hf://: stops after --max-list-pages pages, naming the bound", hangGuard, async () => {
    const line = await spins("hf", "hf://acme/endless", { HF_ENDPOINT: hub.url });
    assert.match(line, /ServerError: .*more than 20 pages .*--max-list-pages/, line);
    assert.equal(hub.requests.filter((r) => r.includes("/tree/")).length, maxPages);
  });

  it("hf://: stops at once when a next page repeats one already read", hangGuard, async () => {
    sameCursor = true;
    const before = hub.requests.filter((r) => r.includes("/tree/")).length;
    const line = await spins("hf-loop", "hf://acme/endless", { HF_ENDPOINT: hub.url });
    sameCursor = false;
    assert.match(line, /ServerError: .*a next page it had already sent/, line);
    assert.equal(hub.requests.filter((r) => r.includes("/tree/")).length - before, 2);
  });

  it("gs://: stops after --max-list-pages pages, naming the bound", hangGuard, async () => {
    const line = await spins("gcs", "gs://models/endless/", { STORAGE_EMULATOR_HOST: gcs.url });
    assert.match(line, /ServerError: .*more than 20 pages .*--max-list-pages/, line);
    assert.equal(gcs.requests.length, maxPages);
  });

  it("s3://: stops after --max-list-pages pages, naming the bound", hangGuard, async () => {
    const line = await spins("s3", "s3://models/endless/", s3Env(s3.url));
    assert.match(line, /ServerError: .*more than 20 pages .*--max-list-pages/, line);
    assert.equal(s3.requests.length, maxPages);
  });

  it("azblob://: stops after --max-list-pages pages, naming the bound", hangGuard, async () => {
    const line = await spins("azure", "azblob://acct/models/endless/", {
      AZURE_STORAGE_BLOB_ENDPOINT: azure.url,
    });
    assert.match(line, /ServerError: .*more than 20 pages .*--max-list-pages/, line);
    assert.equal(azure.requests.length, maxPages);
  });
});
