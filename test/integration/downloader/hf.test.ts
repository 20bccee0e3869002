// `mlmodel download` from hf:// against a local HTTPS server laid out like the Hugging Face hub
// (revision -> commit sha, paged recursive tree, /resolve/ URLs that redirect large files to a
// CDN on another origin). The token must reach the hub and never the CDN.
// test-needs: openssl
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import type http from "node:http";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { FileServer } from "./file-server.ts";
import { makeCertificates, randomBytes, runDownload, tempDir } from "./servers.ts";

const commit = "0123456789abcdef0123456789abcdef01234567";
const token = "hf_testtoken";
const files: Record<string, { body: Buffer; lfs: boolean }> = {
  "config.json": { body: Buffer.from('{"architectures": ["BertModel"]}'), lfs: false },
  "tokenizer.json": { body: Buffer.from('{"version": "1.0"}'), lfs: false },
  "onnx/model.onnx": { body: randomBytes(1_300_000, 21), lfs: true },
  "model.safetensors": { body: randomBytes(2_100_000, 22), lfs: true },
};

function json(res: http.ServerResponse, value: unknown, headers: Record<string, string> = {}): true {
  res.writeHead(200, { "content-type": "application/json", ...headers }).end(JSON.stringify(value));
  return true;
}

function treeEntries(under: string) {
  const entries: Array<Record<string, unknown>> = [{ type: "directory", path: "onnx", oid: "d" }];
  for (const [path, f] of Object.entries(files)) {
    const oid = createHash("sha256").update(f.body).digest("hex");
    entries.push({
      type: "file",
      path,
      size: f.lfs ? 134 : f.body.length,
      oid,
      ...(f.lfs ? { lfs: { oid, size: f.body.length, pointerSize: 134 } } : {}),
    });
  }
  return entries.filter((e) => under === "" || String(e.path).startsWith(`${under}/`));
}

describe("hf:// downloads (hub-layout HTTPS server)", () => {
  const pki = makeCertificates();
  const hub = new FileServer({ tls: { key: pki.key, cert: pki.cert }, bearerToken: token });
  // Another origin (localhost vs 127.0.0.1), as the hub's CDN is.
  const cdn = new FileServer({ tls: { key: pki.key, cert: pki.cert }, host: "localhost" });
  const revisionsAsked: string[] = [];
  let work: string;
  let env: Record<string, string>;

  before(async () => {
    await cdn.start();
    await hub.start();
    for (const f of Object.values(files))
      if (f.lfs) cdn.files.set(`/lfs/${createHash("sha256").update(f.body).digest("hex")}`, f.body);
    hub.routes.push((req, res) => {
      const url = new URL(req.url ?? "/", hub.url);
      const rev = /^\/api\/models\/acme\/bert-tiny\/revision\/([^/]+)$/.exec(url.pathname);
      if (rev) {
        revisionsAsked.push(decodeURIComponent(rev[1]!));
        return json(res, { id: "acme/bert-tiny", sha: commit });
      }
      const tree = new RegExp(`^/api/models/acme/bert-tiny/tree/${commit}(?:/(.*))?$`).exec(url.pathname);
      if (tree) {
        const all = treeEntries(decodeURIComponent(tree[1] ?? ""));
        // Two pages, linked as the hub does, to prove paging is followed.
        if (url.searchParams.get("cursor") === "2") return json(res, all.slice(2));
        url.searchParams.set("cursor", "2");
        return json(res, all.slice(0, 2), { link: `<${url.href}>; rel="next"` });
      }
      const resolve = new RegExp(`^/acme/bert-tiny/resolve/${commit}/(.+)$`).exec(url.pathname);
      if (!resolve) return false;
      const f = files[decodeURIComponent(resolve[1]!)];
      if (!f) return false;
      if (!f.lfs) {
        res.writeHead(200, { "content-length": f.body.length }).end(f.body);
        return true;
      }
      res
        .writeHead(302, { location: `${cdn.url}/lfs/${createHash("sha256").update(f.body).digest("hex")}` })
        .end();
      return true;
    });
    work = tempDir("hf");
    env = { HF_ENDPOINT: hub.url, HF_TOKEN: token, MLMODEL_CA_BUNDLE: pki.caFile };
  });
  after(async () => {
    await hub.stop();
    await cdn.stop();
  });

  it("downloads a whole repo at a pinned commit, following CDN redirects without leaking the token", async () => {
    const dest = join(work, "repo");
    const res = await runDownload(["--uri", "hf://acme/bert-tiny", "--dest", dest], env);
    assert.equal(res.code, 0, res.stderr);
    for (const [path, f] of Object.entries(files))
      assert.deepEqual(readFileSync(join(dest, path)), f.body, path);
    assert.deepEqual(revisionsAsked, ["main"]);
    assert.equal(cdn.requests.length, 2, "the two LFS files came from the CDN");
    assert.ok(
      cdn.requests.every((r) => r.headers.authorization === undefined),
      "no token sent to the CDN",
    );
    assert.ok(hub.requests.every((r) => r.headers.authorization === `Bearer ${token}`));
  });

  it("downloads a sub-path at a named revision", async () => {
    const dest = join(work, "onnx");
    const res = await runDownload(["--uri", "hf://acme/bert-tiny@v1.0/onnx", "--dest", dest], env);
    assert.equal(res.code, 0, res.stderr);
    assert.equal(revisionsAsked.at(-1), "v1.0");
    assert.deepEqual(readFileSync(join(dest, "model.onnx")), files["onnx/model.onnx"]!.body);
    assert.equal(existsSync(join(dest, "config.json")), false);
  });

  it("reports a bad token as AccessDenied naming HF_TOKEN", async () => {
    const res = await runDownload(["--uri", "hf://acme/bert-tiny", "--dest", join(work, "denied")], {
      ...env,
      HF_TOKEN: "hf_wrong",
    });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /^hf:\/\/acme\/bert-tiny: AccessDenied: .*HTTP 401; check HF_TOKEN/m);
  });
});
