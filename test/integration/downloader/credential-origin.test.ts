// Credentials stay with the origin they were configured for, against real HTTP servers on
// loopback (two ports are two origins): custom headers and the bearer token never follow a
// redirect to another origin, the Hugging Face token never follows a next-page Link to another
// origin, and a malformed MLMODEL_HTTP_HEADERS line is never echoed. Each canary may show only
// in the requests to its own origin.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import type http from "node:http";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { FileServer } from "./file-server.ts";
import { randomBytes, runDownload, tempDir } from "./servers.ts";

const canary = (what: string) =>
  `canary${what}${createHash("sha256").update(what).digest("hex").slice(0, 16)}`;
const apiKey = canary("ApiKey");
const bearer = canary("Bearer");
const hfToken = `hf_${canary("HfToken")}`;

function json(res: http.ServerResponse, value: unknown, headers: Record<string, string> = {}): true {
  res.writeHead(200, { "content-type": "application/json", ...headers }).end(JSON.stringify(value));
  return true;
}

/** Every header value a server received, as one text. */
function headersSeen(server: FileServer): string {
  return server.requests.map((r) => JSON.stringify(r.headers)).join("\n");
}

describe("credentials stay with their origin", () => {
  const origin = new FileServer();
  const other = new FileServer();
  const model = randomBytes(64 * 1024 + 5, 41);
  let work: string;

  before(async () => {
    await origin.start();
    await other.start();
    other.files.set("/cdn/model.bin", model);
    origin.files.set("/same/model.bin", model);
    origin.routes.push((req, res) => {
      const path = new URL(req.url ?? "/", origin.url).pathname;
      if (path === "/away/model.bin") {
        res.writeHead(302, { location: `${other.url}/cdn/model.bin` }).end();
        return true;
      }
      if (path === "/near/model.bin") {
        res.writeHead(302, { location: "/same/model.bin" }).end();
        return true;
      }
      return false;
    });
    work = tempDir("credential-origin");
  });
  after(async () => {
    await origin.stop();
    await other.stop();
  });

  const headerEnv = {
    MLMODEL_HTTP_HEADERS: `X-Api-Key: ${apiKey}\nX-Tenant: models`,
    MLMODEL_HTTP_BEARER_TOKEN: bearer,
  };

  it("sends custom headers and the bearer token across a redirect on the same origin", async () => {
    const res = await runDownload(
      ["--uri", `${origin.url}/near/model.bin`, "--dest", join(work, "near")],
      headerEnv,
    );
    assert.equal(res.code, 0, res.stderr);
    const got = origin.fileRequests("/same/model.bin").at(-1);
    assert.equal(got?.headers["x-api-key"], apiKey);
    assert.equal(got?.headers.authorization, `Bearer ${bearer}`);
  });

  it("drops custom headers and the bearer token on a redirect to another origin", async () => {
    const res = await runDownload(
      ["--uri", `${origin.url}/away/model.bin`, "--dest", join(work, "away")],
      headerEnv,
    );
    assert.equal(res.code, 0, res.stderr);
    assert.deepEqual(readFileSync(join(work, "away", "model.bin")), model);
    assert.equal(other.fileRequests("/cdn/model.bin").length, 1, "the file came from the other origin");
    assert.equal(origin.requests.filter((r) => r.headers["x-api-key"] === apiKey).length > 0, true);
    const seen = headersSeen(other);
    assert.ok(!seen.includes(apiKey) && !seen.includes(bearer), seen);
    assert.equal(other.requests[0]?.headers["x-tenant"], undefined, "no configured header at all");
    assert.ok(!res.stderr.includes(apiKey) && !res.stderr.includes(bearer), res.stderr);
  });

  it("never echoes a malformed MLMODEL_HTTP_HEADERS line into stderr or the termination log", async () => {
    const log = join(work, "headers.termination-log");
    const dest = join(work, "bad-headers");
    const res = await runDownload(["--uri", `${origin.url}/same/model.bin`, "--dest", dest], {
      MLMODEL_HTTP_HEADERS: `X-Tenant: models\nX-Api-Key ${apiKey}`,
      MLMODEL_TERMINATION_LOG: log,
    });
    assert.equal(res.code, 1);
    const line = readFileSync(log, "utf8");
    assert.match(line, /InvalidArgument: MLMODEL_HTTP_HEADERS line 2 is not a header/);
    assert.ok(!line.includes(apiKey) && !res.stderr.includes(apiKey), `${line}\n${res.stderr}`);
    assert.equal(existsSync(dest), false);
  });
});

describe("the Hugging Face token and a next-page Link to another origin", () => {
  const commit = "89abcdef0123456789abcdef0123456789abcdef";
  const hub = new FileServer({ bearerToken: hfToken });
  const other = new FileServer();
  const files = { "a.bin": randomBytes(3000, 42), "b.bin": randomBytes(4000, 43) };
  const entry = (path: keyof typeof files) => ({ type: "file", path, size: files[path].length });

  before(async () => {
    await hub.start();
    await other.start();
    hub.routes.push((req, res) => {
      const url = new URL(req.url ?? "/", hub.url);
      if (url.pathname === "/api/models/acme/tiny/revision/main") return json(res, { sha: commit });
      if (url.pathname === `/api/models/acme/tiny/tree/${commit}`)
        return json(res, [entry("a.bin")], {
          link: `<${other.url}/api/models/acme/tiny/tree/${commit}?cursor=2>; rel="next"`,
        });
      const file = new RegExp(`^/acme/tiny/resolve/${commit}/(.+)$`).exec(url.pathname)?.[1];
      if (file === undefined) return false;
      const body = files[file as keyof typeof files];
      res.writeHead(200, { "content-length": body.length }).end(body);
      return true;
    });
    other.routes.push((req, res) => {
      const url = new URL(req.url ?? "/", other.url);
      return url.pathname === `/api/models/acme/tiny/tree/${commit}` && json(res, [entry("b.bin")]);
    });
  });
  after(async () => {
    await hub.stop();
    await other.stop();
  });

  it("reads the page without the token, and downloads from the hub with it", async () => {
    const dest = join(tempDir("hf-link"), "tiny");
    const res = await runDownload(["--uri", "hf://acme/tiny", "--dest", dest], {
      HF_ENDPOINT: hub.url,
      HF_TOKEN: hfToken,
    });
    assert.equal(res.code, 0, res.stderr);
    assert.equal(other.requests.length, 1, "the second page was read from the Link's origin");
    assert.ok(!headersSeen(other).includes(hfToken), headersSeen(other));
    for (const [name, body] of Object.entries(files)) assert.deepEqual(readFileSync(join(dest, name)), body);
  });
});
