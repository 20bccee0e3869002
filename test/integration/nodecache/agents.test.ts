// Node cache agents on loopback, started in-process with an injected peer list, and the real
// `mlmodel download --cache` and `mlmodel cache-copy` run as child processes against them and a
// real local HTTP origin: uploads verified and committed, peer copies checked by sha256, a
// corrupt file detected and fetched again, cache-copy waiting for an entry stored later and
// keeping a complete DEST without asking, LRU eviction that keeps entries in use, 507 on an
// entry that cannot fit, origin bytes counted (0 on the second node).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { cacheCopy } from "../../../src/cli/commands/cache-copy.ts";
import { completionMarkerName } from "../../../src/downloader/contract.ts";
import { DownloadError } from "../../../src/downloader/errors.ts";
import { type AgentOptions, NodeCacheAgent, type Peer } from "../../../src/nodecache/agent.ts";
import { AgentClient } from "../../../src/nodecache/client.ts";
import {
  cacheKey,
  copyIdHeader,
  type EntryManifest,
  type NodeCacheState,
  nodeCacheApi,
} from "../../../src/nodecache/contract.ts";
import { HttpStatusError, requestJson, requestText } from "../../../src/nodecache/http.ts";
import { ContentStore } from "../../../src/nodecache/store.ts";
import { FileServer } from "../downloader/file-server.ts";

const run = promisify(execFile);
const mainTs = join(import.meta.dirname, "..", "..", "..", "src", "cli", "main.ts");
const root = mkdtempSync(join(tmpdir(), "nodecache-agents-"));

interface TestAgent {
  node: string;
  url: string;
  store: ContentStore;
  agent: NodeCacheAgent;
  inUse: Set<string>;
  peers: Peer[];
}

const started: TestAgent[] = [];
after(async () => {
  for (const a of started) await a.agent.close();
  rmSync(root, { recursive: true, force: true });
});

/** An agent whose peers are the `peers` array (a test fills and reorders it). */
async function startAgent(
  node: string,
  budget = 1 << 30,
  extra: Partial<AgentOptions> = {},
): Promise<TestAgent> {
  const store = await ContentStore.open(join(root, node), budget);
  const inUse = new Set<string>();
  const peers: Peer[] = [];
  const agent = new NodeCacheAgent({
    store,
    node,
    peers: async () => peers,
    inUseKeys: async () => inUse,
    peerIdleTimeoutMs: 20_000,
    ...extra,
  });
  const url = await agent.listen(0, "127.0.0.1");
  const a = { node, url, store, agent, inUse, peers };
  started.push(a);
  return a;
}

function client(a: TestAgent): AgentClient {
  return new AgentClient(a.url, {
    deadline: Date.now() + 60_000,
    idleTimeoutMs: 20_000,
    parallel: 4,
    log: () => {},
  });
}

/** Writes `files` under a fresh directory and returns it. */
function tree(files: Record<string, string | Buffer>): string {
  const dir = mkdtempSync(join(root, "tree-"));
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), content);
  }
  return dir;
}

const sha256 = (b: string | Buffer) => createHash("sha256").update(b).digest("hex");
const state = (a: TestAgent) =>
  requestJson<NodeCacheState>(`${a.url}${nodeCacheApi.entries}`, { idleTimeoutMs: 5000 });

async function statusOf(p: Promise<unknown>): Promise<{ status: number; message: string }> {
  try {
    await p;
    return { status: 200, message: "" };
  } catch (raw) {
    // The AgentClient wraps the agent's answer in the downloader's error, the answer its cause.
    const err = raw instanceof DownloadError ? raw.cause : raw;
    assert.ok(err instanceof HttpStatusError, String(raw));
    return { status: err.status, message: err.message };
  }
}

/** Overwrites a stored file with bytes of the same size (a flipped disk block). */
function corrupt(a: TestAgent, key: string, path: string): void {
  const file = a.store.filePath(key, path)!;
  const bytes = readFileSync(file);
  bytes[0] = bytes[0]! ^ 0xff;
  writeFileSync(file, bytes);
}

/** `cache-copy` in-process, its log lines into `log`. */
function copyInto(agent: TestAgent, key: string, dest: string, log: string[]) {
  return cacheCopy({
    cache: agent.url,
    key,
    dest,
    timeoutMs: 60_000,
    idleTimeoutMs: 20_000,
    parallel: 4,
    log: (l) => log.push(l),
  });
}

async function cli(args: string[], env: Record<string, string> = {}) {
  const termLog = join(mkdtempSync(join(root, "term-")), "termination-log");
  try {
    const { stderr } = await run(process.execPath, [mainTs, ...args], {
      env: { ...process.env, MLMODEL_TERMINATION_LOG: termLog, ...env },
    });
    return { code: 0, stderr, termination: "" };
  } catch (err) {
    const e = err as { code?: number; stderr?: string };
    return {
      code: e.code ?? -1,
      stderr: e.stderr ?? "",
      termination: existsSync(termLog) ? readFileSync(termLog, "utf8") : "",
    };
  }
}

describe("node cache agents on loopback", () => {
  let a: TestAgent;
  let b: TestAgent;
  let c: TestAgent;
  const files = {
    "model.bin": randomBytes(300_000),
    "config/settings.json": '{"a":1}',
    "vocab.txt": "x\ny\n",
  };
  const key = cacheKey("https://origin.example/models/demo", undefined);
  let uploaded: EntryManifest;

  before(async () => {
    a = await startAgent("node-a");
    b = await startAgent("node-b");
    c = await startAgent("node-c");
    for (const x of [a, b, c])
      x.peers.push(...[a, b, c].filter((p) => p !== x).map((p) => ({ node: p.node, url: p.url })));
  });

  it("verifies an upload and commits it; refuses a manifest the files do not match", async () => {
    uploaded = await client(a).upload(key, "https://origin.example/models/demo", tree(files), new Set());
    assert.equal(uploaded.files.length, 3);
    assert.equal(uploaded.size, 300_000 + 7 + 4);
    assert.equal(uploaded.files.find((f) => f.path === "model.bin")?.sha256, sha256(files["model.bin"]));
    const s = await state(a);
    assert.deepEqual(
      s.entries.map((e) => [e.key, e.source, e.size, e.files]),
      [[key, "origin", uploaded.size, 3]],
    );
    assert.equal(s.bytesFromOrigin, uploaded.size);

    const other = cacheKey("https://origin.example/other", undefined);
    await requestText(`${a.url}${nodeCacheApi.file(other, "w.bin")}`, {
      method: "PUT",
      body: "real bytes",
      idleTimeoutMs: 5000,
    });
    const lie = {
      key: other,
      uri: "u",
      files: [{ path: "w.bin", size: 10, sha256: sha256("fake bytes") }],
      size: 10,
    };
    const refused = await statusOf(
      requestJson(`${a.url}${nodeCacheApi.commit(other)}`, {
        method: "POST",
        body: JSON.stringify(lie),
        idleTimeoutMs: 5000,
      }),
    );
    assert.equal(refused.status, 422);
    assert.match(refused.message, /w\.bin has sha256 [0-9a-f]{64}, the manifest says/);
    const noUpload = await statusOf(
      requestJson(`${a.url}${nodeCacheApi.commit(other)}`, {
        method: "POST",
        body: JSON.stringify(lie),
        idleTimeoutMs: 5000,
      }),
    );
    assert.equal(noUpload.status, 404);
    assert.match(
      noUpload.message,
      /no upload of entry [0-9a-f]+ is staged on node node-a: PUT its files first/,
    );
    const missing = await statusOf(
      requestJson(`${a.url}${nodeCacheApi.entry(other)}`, { idleTimeoutMs: 5000 }),
    );
    assert.equal(missing.status, 404);
    assert.match(missing.message, /node node-a holds no entry/);
  });

  it("shows a copy into a pod in its state while the copy's files go out, and not once all have", async () => {
    const headers = { [copyIdHeader]: "copy-into-a-pod" };
    const get = async (path: string) =>
      Buffer.from(await (await fetch(`${a.url}${nodeCacheApi.file(key, path)}`, { headers })).arrayBuffer());
    assert.equal(a.agent.state().fills, undefined, "no copy before");
    assert.deepEqual(await get("model.bin"), files["model.bin"]);
    // One file of three out: the pod's copy is under way, and the state says how far.
    assert.deepEqual(
      (a.agent.state().fills ?? []).map((f) => [f.key, f.kind, f.bytesDone, f.bytesTotal]),
      [[key, "pod", 300_000, uploaded.size]],
    );
    await get("config/settings.json");
    await get("vocab.txt");
    assert.equal(a.agent.state().fills, undefined, "the copy is over once its bytes are all out");
  });

  it("ensure copies a missing entry from a peer, file by file with sha256 checks", async () => {
    const got = await client(b).ensure(key);
    assert.deepEqual(got, uploaded);
    const s = await state(b);
    assert.deepEqual(
      s.entries.map((e) => [e.key, e.source, e.peer]),
      [[key, "peer", "node-a"]],
    );
    assert.equal(s.bytesFromPeers, uploaded.size);
    assert.equal(s.bytesFromOrigin, 0);
    assert.deepEqual(readFileSync(b.store.filePath(key, "model.bin")!), files["model.bin"]);
    const unknown = cacheKey("https://origin.example/nobody-has-it", undefined);
    assert.equal(await client(b).ensure(unknown), undefined);
    const why = await statusOf(
      requestJson(`${b.url}${nodeCacheApi.ensure(unknown)}`, { method: "POST", idleTimeoutMs: 5000 }),
    );
    assert.match(
      why.message,
      /no agent holds entry [0-9a-f]+: node node-b lacks it and 2 peer\(s\) \(node-a, node-c\) have none/,
    );
  });

  it("a corrupt file on a peer is detected: the copy comes from another peer and the peer re-verifies", async () => {
    await client(c).ensure(key); // c copies from a (its first peer)
    corrupt(a, key, "model.bin");
    await b.store.drop(key, false);
    b.peers.sort((x, y) => (x.node < y.node ? -1 : 1)); // node-a first, then node-c
    await client(b).ensure(key);
    const s = await state(b);
    assert.deepEqual(
      s.entries.map((e) => [e.key, e.peer]),
      [[key, "node-c"]],
    );
    assert.deepEqual(readFileSync(b.store.filePath(key, "model.bin")!), files["model.bin"]);
    // node-a was asked to re-verify: it drops its corrupt entry and fetches it again from a peer.
    for (let i = 0; i < 200 && a.store.entry(key)?.source !== "peer"; i++)
      await new Promise((r) => setTimeout(r, 50));
    assert.equal(a.store.entry(key)?.source, "peer");
    assert.deepEqual(readFileSync(a.store.filePath(key, "model.bin")!), files["model.bin"]);
  });

  it("cache-copy detects a corrupted file in its node's entry, has it dropped and fetched again, then verifies", async () => {
    corrupt(b, key, "model.bin");
    const dest = join(root, "serving-b", "model");
    const log: string[] = [];
    await copyInto(b, key, dest, log);
    assert.ok(
      log.some((l) => /1 file\(s\) did not verify: model\.bin .*asking the agent to re-verify/.test(l)),
      log.join("\n"),
    );
    assert.deepEqual(readFileSync(join(dest, "model.bin")), files["model.bin"]);
    assert.equal(readFileSync(join(dest, "config/settings.json"), "utf8"), files["config/settings.json"]);
    assert.ok(existsSync(join(dest, completionMarkerName)));
    assert.equal(b.store.entry(key)?.source, "peer", "node-b holds a fresh copy from a peer");
    assert.equal(await b.store.reverify(key), undefined);
    log.length = 0;
    await copyInto(b, key, dest, log);
    assert.ok(
      log.some((l) => l.startsWith("already complete")),
      log.join("\n"),
    );
  });

  it("cache-copy waits for an entry no agent holds yet, says so once, and copies it once a node stores it", async () => {
    const uri = "https://origin.example/models/stored-later";
    const later = cacheKey(uri, undefined);
    const dest = join(root, "serving-later", "model");
    const log: string[] = [];
    let saidWaiting: () => void = () => {};
    const waiting = new Promise<void>((resolve) => {
      saidWaiting = resolve;
    });
    const copying = cacheCopy({
      cache: b.url,
      key: later,
      dest,
      timeoutMs: 60_000,
      idleTimeoutMs: 20_000,
      parallel: 4,
      pollMs: 20,
      log: (l) => {
        log.push(l);
        if (l.startsWith("waiting for cache entry")) saidWaiting();
      },
    });
    await waiting;
    // The download Job's upload, to another node: node-b's agent copies it from that peer.
    await client(a).upload(later, uri, tree({ "later.bin": "stored while cache-copy waited" }), new Set());
    const marker = await copying;
    assert.equal(marker.cacheKey, later);
    assert.equal(readFileSync(join(dest, "later.bin"), "utf8"), "stored while cache-copy waited");
    assert.deepEqual(
      log.filter((l) => l.startsWith("waiting for cache entry")),
      [
        `waiting for cache entry ${later}: no node cache agent holds it yet (the model's download Job stores it); asking again every 20 ms until the timeout`,
      ],
      "said once, however many times it asked",
    );
  });

  it("cache-copy keeps a DEST already complete for the key without asking any agent", async () => {
    const dest = join(root, "serving-b", "model");
    const log: string[] = [];
    // Nothing listens there: asking would fail (connection refused until the timeout).
    const marker = await cacheCopy({
      cache: "http://127.0.0.1:9",
      key,
      dest,
      timeoutMs: 1000,
      idleTimeoutMs: 1000,
      parallel: 4,
      log: (l) => log.push(l),
    });
    assert.equal(marker.cacheKey, key);
    assert.deepEqual(log, [`already complete: ${dest} (entry ${key})`]);
    assert.deepEqual(readFileSync(join(dest, "model.bin")), files["model.bin"]);
  });

  it("evicts the least recently used entry, never one in use, and refuses with 507 what cannot fit", async () => {
    const small = await startAgent("node-small", 100);
    const k = (n: number) => cacheKey(`https://origin.example/small/${n}`, undefined);
    const put = (n: number, size: number) =>
      client(small).upload(k(n), `u${n}`, tree({ f: "z".repeat(size) }), new Set());
    await put(1, 40);
    await put(2, 40);
    small.inUse.add(k(1)); // k(1) is older than k(2), but a pod serves it
    await put(3, 40);
    let s = await state(small);
    assert.deepEqual(s.entries.map((e) => e.key).sort(), [k(1), k(3)].sort());
    assert.equal(s.entries.find((e) => e.key === k(1))?.inUse, true);
    assert.equal(s.evictions, 1);
    const tooBig = await statusOf(put(4, 70));
    assert.equal(tooBig.status, 507);
    assert.match(
      tooBig.message,
      /needs 70 bytes; the budget is 100 bytes, of which 40 are held by entries in use/,
    );
    s = await state(small);
    assert.deepEqual(
      s.entries.map((e) => e.key).sort(),
      [k(1), k(3)].sort(),
      "nothing evicted for a refused entry",
    );
    small.peers.push({ node: a.node, url: a.url });
    const fromPeer = await statusOf(
      requestJson(`${small.url}${nodeCacheApi.ensure(key)}`, { method: "POST", idleTimeoutMs: 5000 }),
    );
    assert.equal(fromPeer.status, 507);
    assert.match(fromPeer.message, /needs 300011 bytes; the budget is 100 bytes/);
  });
});

describe("a peer that dies mid-copy", () => {
  it("leaves nothing half copied: the copy comes from the next peer and the room is given back", async () => {
    const good = await startAgent("node-good");
    const taker = await startAgent("node-taker");
    const body = randomBytes(400_000);
    const k = cacheKey("https://origin.example/mid-copy", undefined);
    const manifest = await client(good).upload(k, "u", tree({ "w.bin": body }), new Set());
    // A peer that has the manifest and dies after sending part of the file.
    const dying = http.createServer((req, res) => {
      if (req.url === nodeCacheApi.entry(k)) {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(manifest));
        return;
      }
      res.writeHead(200, { "content-length": body.length });
      res.write(body.subarray(0, 100_000), () => res.destroy());
    });
    await new Promise<void>((resolve) => dying.listen(0, "127.0.0.1", resolve));
    after(() => new Promise<void>((resolve) => dying.close(() => resolve())));
    const dyingUrl = `http://127.0.0.1:${(dying.address() as AddressInfo).port}`;
    taker.peers.push({ node: "node-dying", url: dyingUrl }, { node: good.node, url: good.url });

    assert.deepEqual(await client(taker).ensure(k), manifest);
    assert.equal(taker.store.entry(k)?.peer, good.node);
    assert.deepEqual(readFileSync(taker.store.filePath(k, "w.bin")!), body);
    assert.equal(taker.store.reservedBytes, 0);
    assert.deepEqual(readdirSync(join(root, taker.node, "staging")), []);
  });
});

describe("uploads nobody finishes", () => {
  it("are dropped once idle, giving their room back", async () => {
    const agent = await startAgent("node-idle", 100);
    const k = cacheKey("https://origin.example/abandoned", undefined);
    await requestText(`${agent.url}${nodeCacheApi.file(k, "part.bin")}`, {
      method: "PUT",
      body: "p".repeat(60),
      idleTimeoutMs: 5000,
    });
    assert.equal(agent.store.reservedBytes, 60);
    await agent.agent.discardIdleUploads(0);
    assert.equal(agent.store.reservedBytes, 0);
    const commit = await statusOf(
      requestJson(`${agent.url}${nodeCacheApi.commit(k)}`, {
        method: "POST",
        body: JSON.stringify({
          key: k,
          uri: "u",
          files: [{ path: "part.bin", size: 60, sha256: sha256("p".repeat(60)) }],
          size: 60,
        }),
        idleTimeoutMs: 5000,
      }),
    );
    assert.equal(commit.status, 404);
    const other = cacheKey("https://origin.example/after", undefined);
    const m = await client(agent).upload(other, "u", tree({ f: "q".repeat(90) }), new Set());
    assert.equal(m.size, 90, "the abandoned upload's 60 bytes no longer count against the budget of 100");
  });

  it("end a PUT whose sender went silent, so the upload can be dropped", async () => {
    const agent = await startAgent("node-stalled", 1000, { uploadIdleTimeoutMs: 200 });
    const k = cacheKey("https://origin.example/stalled", undefined);
    const req = http.request(`${agent.url}${nodeCacheApi.file(k, "big.bin")}`, {
      method: "PUT",
      headers: { "content-length": 500 },
    });
    const ended = new Promise<void>((resolve) => {
      req.on("error", () => resolve());
      req.on("response", (res) => res.resume().on("end", resolve).on("error", resolve));
    });
    req.write("x".repeat(10)); // and nothing more
    await ended;
    assert.equal(
      agent.store.reservedBytes,
      500,
      "the stalled PUT's room is held until the upload is dropped",
    );
    // The agent ends its side of the PUT a moment after the client sees the socket close.
    for (let i = 0; i < 100 && agent.store.reservedBytes > 0; i++) {
      await agent.agent.discardIdleUploads(0);
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(agent.store.reservedBytes, 0);
    assert.deepEqual(readdirSync(join(root, agent.node, "staging")), []);
  });
});

describe("download --cache and cache-copy against a real origin", () => {
  let origin: FileServer;
  let first: TestAgent;
  let second: TestAgent;
  const body = randomBytes(2_000_000);

  before(async () => {
    origin = await new FileServer().start();
    origin.files.set("/models/e2e.bin", body);
    first = await startAgent("e2e-1");
    second = await startAgent("e2e-2");
    second.peers.push({ node: first.node, url: first.url });
    first.peers.push({ node: second.node, url: second.url });
  });
  after(() => origin.stop());

  it("fetches from the origin once: the second node copies from the first, 0 origin bytes", async () => {
    const uri = `${origin.url}/models/e2e.bin`;
    const key = cacheKey(uri, sha256(body));
    const originBytes = () =>
      origin.fileRequests("/models/e2e.bin").filter((r) => r.method === "GET").length * body.length;
    const download = (agent: TestAgent, scratch: string) =>
      cli([
        "download",
        "--uri",
        uri,
        "--sha256",
        sha256(body),
        "--dest",
        join(root, scratch, "model"),
        "--cache",
        agent.url,
        "--cache-key",
        key,
      ]);

    const one = await download(first, "scratch-1");
    assert.equal(one.code, 0, one.stderr);
    assert.match(one.stderr, /no node cache agent holds entry .*: downloading from the origin/);
    assert.match(one.stderr, /stored in the node cache as entry/);
    assert.equal(originBytes(), body.length);
    assert.equal((await state(first)).bytesFromOrigin, body.length);

    const two = await download(second, "scratch-2");
    assert.equal(two.code, 0, two.stderr);
    assert.match(two.stderr, /the node cache holds entry .*0 bytes from the origin/);
    assert.equal(originBytes(), body.length, "the second node fetched nothing from the origin");
    const s = await state(second);
    assert.deepEqual(
      s.entries.map((e) => [e.source, e.peer, e.size]),
      [["peer", first.node, body.length]],
    );
    assert.equal(
      existsSync(join(root, "scratch-2", "model")),
      false,
      "nothing downloaded into the scratch dir",
    );

    const dest = join(root, "serving-e2e", "model");
    const copy = await cli(["cache-copy", "--cache", second.url, "--key", key, "--dest", dest]);
    assert.equal(copy.code, 0, copy.stderr);
    assert.deepEqual(readFileSync(join(dest, "e2e.bin")), body);
    const again = await cli(["cache-copy", "--cache", second.url, "--key", key, "--dest", dest]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /already complete/);
    assert.equal(originBytes(), body.length);
  });

  it("cache-copy of a key no agent holds until its timeout exits 1 with one line in the termination log", async () => {
    const missing = cacheKey("https://origin.example/never", undefined);
    const r = await cli([
      "cache-copy",
      "--cache",
      second.url,
      "--key",
      missing,
      "--dest",
      join(root, "never", "model"),
      "--timeout",
      "3",
    ]);
    assert.equal(r.code, 1);
    assert.equal(r.stderr.match(/waiting for cache entry/g)?.length, 1, r.stderr);
    assert.match(
      r.termination,
      new RegExp(`^cache entry ${missing}: NotFound: no node cache agent holds entry ${missing}; `),
    );
    assert.equal(r.termination.trim().split("\n").length, 1);
    const bad = await cli([
      "cache-copy",
      "--cache",
      second.url,
      "--key",
      "Not/A/Key",
      "--dest",
      join(root, "x"),
    ]);
    assert.equal(bad.code, 2);
    assert.match(bad.termination, /--key "Not\/A\/Key" is not a cache key/);
  });
});
