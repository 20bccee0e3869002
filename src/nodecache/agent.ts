// The node cache agent's HTTP server (the API in contract.ts): serves entries from the store,
// takes uploads from download Jobs on its node (staged, committed after verification), and on
// `ensure` copies a missing entry from a peer agent, checking every file's sha256.
// Peers and the keys in use come from injected functions (kube.ts gives the cluster's).
import { createReadStream } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { mapBounded } from "../downloader/download.ts";
import { copyIdHeader, type EntryManifest, type NodeCacheState, nodeCacheApi } from "./contract.ts";
import { FillTracker } from "./fills.ts";
import { downloadTo, HttpStatusError, readText, requestJson, saveHashed, send } from "./http.ts";
import {
  type ContentStore,
  checkManifest,
  EntryInvalidError,
  NoRoomError,
  type StoredEntry,
  validKey,
  validRelativePath,
} from "./store.ts";

/** Another node's agent. */
export interface Peer {
  node: string;
  /** Its base URL, e.g. http://10.0.1.7:8375. */
  url: string;
}

export interface AgentOptions {
  store: ContentStore;
  node: string;
  /** The other agents, asked on each ensure of a missing key (never this agent). */
  peers: () => Promise<Peer[]>;
  /** Keys that pods on this node serve: never evicted. */
  inUseKeys: () => Promise<ReadonlySet<string>>;
  log?: (line: string) => void;
  /**
   * Told whenever what the agent holds or reports changes (the state writer listens), a copy's
   * bytes included: the writer bounds how often the state is written.
   */
  onChange?: () => void;
  /** How long a peer may keep silent during a copy. */
  peerIdleTimeoutMs?: number;
  /** Files copied from a peer at once. */
  peerParallel?: number;
  /** How long an uploader may keep silent inside a PUT's body. */
  uploadIdleTimeoutMs?: number;
}

/** An answer with a status and one line saying why. */
class Refusal extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

interface Upload {
  /** Files are PUT in parallel: the first creates the staging directory, the others wait for it. */
  ready: Promise<void>;
  staging: string;
  /** Each file received whole: its size and the sha256 computed on the way. */
  files: Map<string, { size: number; sha256: string }>;
  /** Room reserved in the store per file, released once the entry is committed or dropped. */
  reserved: Map<string, number>;
  touchedAt: number;
  /** PUTs under way: an upload with one is never idle, however long its file takes. */
  active: number;
}

const maxManifestBytes = 16 << 20;

export class NodeCacheAgent {
  readonly #opts: AgentOptions;
  readonly #store: ContentStore;
  readonly #server: http.Server;
  readonly #uploads = new Map<string, Upload>();
  readonly #ensuring = new Map<string, Promise<EntryManifest>>();
  /** Keys being streamed out or copied in right now: not evicted under a reader's feet. */
  readonly #pins = new Map<string, number>();
  /** Copies under way (into this cache from a peer, out of it into a pod), for the state. */
  readonly #fills = new FillTracker();
  #inUse: ReadonlySet<string> = new Set();
  #inUseKnown = false;
  bytesFromPeers = 0;
  bytesFromOrigin = 0;

  constructor(opts: AgentOptions) {
    this.#opts = opts;
    this.#store = opts.store;
    this.#server = http.createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => this.#fail(res, err));
    });
    // A 100 GB upload takes longer than node's default bound on a whole request (300 s); a
    // silent sender is bounded per PUT instead, and an ensure may wait for a long peer copy.
    this.#server.requestTimeout = 0;
  }

  /** Listens and resolves with the base URL. */
  async listen(port: number, host = "0.0.0.0"): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(port, host, () => resolve());
    });
    const addr = this.#server.address() as AddressInfo;
    const shown = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
    return `http://${shown}:${addr.port}`;
  }

  /** Stops taking requests and ends the ones in flight. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.#server.closeAllConnections();
    await closed;
    for (const u of this.#uploads.values()) await this.#discardUpload(u);
    this.#uploads.clear();
  }

  /** Reads the keys in use again (the state shows them; eviction reads them itself). */
  async refreshInUse(): Promise<void> {
    const before = [...this.#inUse].sort().join();
    this.#inUse = await this.#opts.inUseKeys();
    this.#inUseKnown = true;
    if ([...this.#inUse].sort().join() !== before) this.#opts.onChange?.();
  }

  state(now = new Date()): NodeCacheState {
    const fills = this.#fills.report();
    return {
      node: this.#opts.node,
      budgetBytes: this.#store.budgetBytes,
      usedBytes: this.#store.usedBytes,
      bytesFromPeers: this.bytesFromPeers,
      bytesFromOrigin: this.bytesFromOrigin,
      evictions: this.#store.evictions,
      entries: this.#store
        .entries()
        .map((e) => ({
          key: e.manifest.key,
          uri: e.manifest.uri,
          size: e.manifest.size,
          files: e.manifest.files.length,
          source: e.source,
          ...(e.peer ? { peer: e.peer } : {}),
          completedAt: e.completedAt,
          lastUsedAt: e.lastUsedAt,
          inUse: this.#inUse.has(e.manifest.key),
        }))
        .sort((a, b) => (a.key < b.key ? -1 : 1)),
      ...(fills.length > 0 ? { fills } : {}),
      updatedAt: now.toISOString(),
    };
  }

  #log(line: string): void {
    this.#opts.log?.(line);
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://agent");
    const method = req.method ?? "GET";
    if (url.pathname === nodeCacheApi.health) return sendJson(res, 200, { ok: true });
    if (url.pathname === nodeCacheApi.entries && method === "GET") return sendJson(res, 200, this.state());
    const m = /^\/v1\/entries\/([^/]+)(?:\/(commit|ensure|files\/(.+)))?$/.exec(url.pathname);
    if (!m) throw new Refusal(404, `no such path ${url.pathname}; see the API in docs/node-cache-agent.md`);
    const key = decodeSegment(m[1]!);
    if (!validKey(key))
      throw new Refusal(400, `key "${key}" is not a cache key (lowercase letters, digits, "-")`);
    const action = m[2];
    if (action === undefined && method === "GET") return sendJson(res, 200, this.#manifestOr404(key));
    if (action === "commit" && method === "POST") return this.#commitUpload(key, req, res);
    if (action === "ensure" && method === "POST")
      return sendJson(res, 200, await this.ensure(key, url.searchParams.get("verify") === "1"));
    if (m[3] !== undefined) {
      const path = m[3].split("/").map(decodeSegment).join("/");
      if (!validRelativePath(path))
        throw new Refusal(400, `file path "${path}" must be relative, "/"-separated, without "." or ".."`);
      if (method === "GET") return this.#serveFile(key, path, res, copyIdOf(req));
      if (method === "PUT") return this.#receiveFile(key, path, req, res);
    }
    throw new Refusal(405, `${method} is not allowed on ${url.pathname}`);
  }

  #manifestOr404(key: string): EntryManifest {
    const e = this.#store.entry(key);
    if (!e) throw new Refusal(404, `node ${this.#opts.node} holds no entry ${key}`);
    return e.manifest;
  }

  async #serveFile(key: string, path: string, res: http.ServerResponse, copyId?: string): Promise<void> {
    const file = this.#store.filePath(key, path);
    if (!file) {
      throw new Refusal(
        404,
        this.#store.entry(key)
          ? `entry ${key} on node ${this.#opts.node} has no file "${path}"`
          : `node ${this.#opts.node} holds no entry ${key}`,
      );
    }
    const manifest = this.#store.entry(key)!.manifest;
    const size = manifest.files.find((f) => f.path === path)!.size;
    const fill = copyId ? `pod:${copyId}` : undefined;
    if (fill) this.#fills.start(fill, { key, kind: "pod", bytesTotal: manifest.size });
    this.#pin(key);
    try {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": size });
      const source = createReadStream(file, { highWaterMark: 1 << 20 });
      if (fill) await pipeline(source, this.#counter(fill), res);
      else await pipeline(source, res);
    } finally {
      this.#unpin(key);
    }
  }

  async #receiveFile(key: string, path: string, req: http.IncomingMessage, res: http.ServerResponse) {
    const length = Number(req.headers["content-length"]);
    if (!Number.isSafeInteger(length) || length < 0)
      throw new Refusal(
        411,
        `PUT of ${path} in entry ${key} needs a Content-Length (room is made before bytes land)`,
      );
    const idleMs = this.#opts.uploadIdleTimeoutMs ?? 120_000;
    req.setTimeout(idleMs, () =>
      req.destroy(new Error(`the upload of ${path} sent nothing for ${idleMs / 1000}s`)),
    );
    const upload = await this.#uploadOf(key);
    upload.active++;
    try {
      await this.#receiveInto(upload, key, path, length, req, res);
    } finally {
      upload.active--;
      upload.touchedAt = Date.now();
    }
  }

  async #receiveInto(
    upload: Upload,
    key: string,
    path: string,
    length: number,
    req: http.IncomingMessage,
    res: http.ServerResponse,
  ): Promise<void> {
    // A file sent again (a retried PUT) gives back the room its first attempt held.
    this.#store.release(upload.reserved.get(path) ?? 0);
    upload.reserved.delete(path);
    const evicted = await this.#store.reserve(key, length, () => this.#keep());
    upload.reserved.set(path, length);
    if (evicted.length > 0) this.#logEvicted(evicted, key);
    const file = { path, ...(await saveHashed(req, this.#store.stagedPath(upload.staging, path))) };
    upload.files.set(path, file);
    sendJson(res, 200, file);
  }

  /**
   * Uploads nobody added to for `maxIdleMs` (a download Job killed mid-upload) are dropped, and
   * so are the reports of copies that moved no byte for `copyIdleMs` (a pod that died mid-copy).
   */
  async discardIdleUploads(maxIdleMs: number, now = Date.now(), copyIdleMs = 60_000): Promise<void> {
    if (this.#fills.dropIdle(copyIdleMs)) this.#opts.onChange?.();
    for (const [key, upload] of this.#uploads) {
      if (upload.active > 0 || now - upload.touchedAt < maxIdleMs) continue;
      this.#uploads.delete(key);
      await this.#discardUpload(upload);
      this.#log(`dropped the upload of ${key}: nothing arrived for ${Math.round(maxIdleMs / 1000)}s`);
    }
  }

  async #discardUpload(upload: Upload): Promise<void> {
    await upload.ready;
    for (const bytes of upload.reserved.values()) this.#store.release(bytes);
    upload.reserved.clear();
    await this.#store.discardStaging(upload.staging);
  }

  #logEvicted(evicted: string[], key: string): void {
    this.#log(`evicted ${evicted.join(", ")} to make room for ${key}`);
    this.#opts.onChange?.();
  }

  async #uploadOf(key: string): Promise<Upload> {
    let upload = this.#uploads.get(key);
    if (!upload) {
      const staging = this.#store.newStaging(key);
      const created: Upload = {
        ready: staging.then(() => {}),
        staging: "",
        files: new Map(),
        reserved: new Map(),
        touchedAt: Date.now(),
        active: 0,
      };
      created.ready = staging.then((dir) => {
        created.staging = dir;
      });
      upload = created;
      this.#uploads.set(key, upload);
    }
    await upload.ready;
    return upload;
  }

  async #commitUpload(key: string, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let body: unknown;
    try {
      body = JSON.parse(await readText(req, maxManifestBytes));
    } catch (err) {
      throw new Refusal(
        400,
        `the body of commit must be the entry's manifest as JSON: ${(err as Error).message}`,
      );
    }
    const manifest = checkManifest(key, body);
    const upload = this.#uploads.get(key);
    await upload?.ready;
    if (!upload) {
      if (this.#store.entry(key)) return sendJson(res, 200, this.#store.entry(key)!.manifest);
      throw new Refusal(
        404,
        `no upload of entry ${key} is staged on node ${this.#opts.node}: PUT its files first`,
      );
    }
    this.#uploads.delete(key);
    const hashes = new Map([...upload.files].map(([path, f]) => [path, f.sha256]));
    const reserved = [...upload.reserved.values()].reduce((a, b) => a + b, 0);
    let entry: StoredEntry;
    try {
      ({ entry } = await this.#commit(upload.staging, manifest, { source: "origin" }, hashes, reserved));
    } finally {
      await this.#discardUpload(upload);
    }
    this.bytesFromOrigin += manifest.size;
    this.#log(
      `committed ${key} from an origin download: ${manifest.files.length} file(s), ${manifest.size} bytes`,
    );
    this.#opts.onChange?.();
    sendJson(res, 200, entry.manifest);
  }

  async #commit(
    staging: string,
    manifest: EntryManifest,
    origin: { source: "origin" | "peer"; peer?: string },
    hashes: Map<string, string>,
    reservedBytes: number,
  ) {
    const result = await this.#store.commit(
      staging,
      manifest,
      origin,
      () => this.#keep(),
      hashes,
      reservedBytes,
    );
    if (result.evicted.length > 0) this.#logEvicted(result.evicted, manifest.key);
    return result;
  }

  /** Keys never to evict: in use by pods (read now, as eviction is about to happen), or being streamed. */
  async #keep(): Promise<Set<string>> {
    try {
      this.#inUse = await this.#opts.inUseKeys();
      this.#inUseKnown = true;
    } catch (err) {
      // Without a fresh answer, every entry counts as in use: better refuse than evict a served one.
      this.#log(`cannot read the keys in use (${(err as Error).message}); evicting nothing`);
      if (!this.#inUseKnown) return new Set(this.#store.entries().map((e) => e.manifest.key));
    }
    return new Set([...this.#inUse, ...this.#pins.keys()]);
  }

  /**
   * The manifest of KEY once this node holds it, copying it from a peer if needed; `verify`
   * reads the held entry's files again first and drops it when one does not match. Concurrent
   * ensures of one key share one copy.
   */
  async ensure(key: string, verify = false): Promise<EntryManifest> {
    const running = this.#ensuring.get(key);
    if (running) return running;
    const work = this.#ensure(key, verify).finally(() => this.#ensuring.delete(key));
    this.#ensuring.set(key, work);
    return work;
  }

  async #ensure(key: string, verify: boolean): Promise<EntryManifest> {
    if (verify && this.#store.entry(key)) {
      const problem = await this.#store.reverify(key);
      if (problem) {
        this.#log(`entry ${key} failed its re-verification (${problem}); dropped, fetching it again`);
        this.#opts.onChange?.();
      }
    }
    const held = this.#store.entry(key);
    if (held) {
      await this.#store.touch(key);
      return held.manifest;
    }
    return this.#copyFromPeers(key);
  }

  async #copyFromPeers(key: string): Promise<EntryManifest> {
    let peers: Peer[];
    try {
      peers = await this.#opts.peers();
    } catch (err) {
      throw new Refusal(503, `node ${this.#opts.node} cannot list its peers: ${(err as Error).message}`);
    }
    const idleTimeoutMs = this.#opts.peerIdleTimeoutMs ?? 30_000;
    const failures: string[] = [];
    for (const peer of peers) {
      let manifest: EntryManifest;
      try {
        manifest = checkManifest(
          key,
          await requestJson(`${peer.url}${nodeCacheApi.entry(key)}`, { idleTimeoutMs }),
        );
      } catch (err) {
        if (!(err instanceof HttpStatusError && err.status === 404))
          failures.push(`${peer.node}: ${(err as Error).message}`);
        continue;
      }
      // Room is made before any byte moves; an entry that cannot fit is refused here.
      const evicted = await this.#store.reserve(key, manifest.size, () => this.#keep());
      if (evicted.length > 0) this.#logEvicted(evicted, key);
      try {
        await this.#copyFrom(peer, manifest, idleTimeoutMs);
        return manifest;
      } catch (err) {
        if (err instanceof NoRoomError) throw err;
        failures.push(`${peer.node}: ${(err as Error).message}`);
        this.#log(`copy of ${key} from ${peer.node} failed: ${(err as Error).message}`);
      } finally {
        this.#store.release(manifest.size);
      }
    }
    if (failures.length === 0) {
      throw new Refusal(
        404,
        `no agent holds entry ${key}: node ${this.#opts.node} lacks it and ${peers.length} peer(s) (${peers.map((p) => p.node).join(", ") || "none"}) have none`,
      );
    }
    throw new Refusal(
      502,
      `entry ${key} could not be copied to node ${this.#opts.node}: ${failures.join("; ")}`,
    );
  }

  async #copyFrom(peer: Peer, manifest: EntryManifest, idleTimeoutMs: number): Promise<void> {
    const staging = await this.#store.newStaging(manifest.key);
    const hashes = new Map<string, string>();
    const fill = `peer:${manifest.key}:${peer.node}`;
    this.#fills.start(fill, { key: manifest.key, kind: "peer", peer: peer.node, bytesTotal: manifest.size });
    this.#pin(manifest.key);
    try {
      await mapBounded(
        manifest.files,
        this.#opts.peerParallel ?? 4,
        new AbortController().signal,
        async (f, signal) => {
          const got = await downloadTo(
            `${peer.url}${nodeCacheApi.file(manifest.key, f.path)}`,
            this.#store.stagedPath(staging, f.path),
            { idleTimeoutMs, signal, onBytes: (n) => this.#filled(fill, n) },
          );
          if (got.size !== f.size || got.sha256 !== f.sha256) {
            this.#askToReverify(peer, manifest.key);
            throw new EntryInvalidError(
              `${f.path} arrived with ${got.size} bytes and sha256 ${got.sha256}; the manifest says ${f.size} bytes, sha256 ${f.sha256}`,
            );
          }
          hashes.set(f.path, got.sha256);
        },
      );
      await this.#commit(staging, manifest, { source: "peer", peer: peer.node }, hashes, manifest.size);
      this.bytesFromPeers += manifest.size;
      this.#log(
        `copied ${manifest.key} from ${peer.node}: ${manifest.files.length} file(s), ${manifest.size} bytes`,
      );
      this.#opts.onChange?.();
    } finally {
      this.#fills.end(fill);
      this.#unpin(manifest.key);
      await this.#store.discardStaging(staging);
    }
  }

  /** A pass-through that reports the bytes of a copy into a pod as they go out. */
  #counter(fill: string): Transform {
    return new Transform({
      transform: (chunk: Buffer, _enc, done) => {
        this.#filled(fill, chunk.length);
        done(null, chunk);
      },
    });
  }

  /** Bytes of a copy moved: the state shows them at its next write. */
  #filled(fill: string, bytes: number): void {
    this.#fills.add(fill, bytes);
    this.#opts.onChange?.();
  }

  /** A peer sent bytes that do not match its manifest: it re-reads its entry (and drops it if corrupt). */
  #askToReverify(peer: Peer, key: string): void {
    send(`${peer.url}${nodeCacheApi.ensure(key)}?verify=1`, { method: "POST", idleTimeoutMs: 300_000 })
      .then((res) => res.resume())
      .catch(() => {});
  }

  #pin(key: string): void {
    this.#pins.set(key, (this.#pins.get(key) ?? 0) + 1);
  }

  #unpin(key: string): void {
    const n = (this.#pins.get(key) ?? 1) - 1;
    if (n > 0) this.#pins.set(key, n);
    else this.#pins.delete(key);
  }

  #fail(res: http.ServerResponse, err: unknown): void {
    const status =
      err instanceof Refusal
        ? err.status
        : err instanceof NoRoomError
          ? 507
          : err instanceof EntryInvalidError
            ? 422
            : 500;
    const message = (err as Error).message ?? String(err);
    if (status >= 500 && status !== 507) this.#log(`error: ${message}`);
    if (res.headersSent) {
      res.destroy(err as Error);
      return;
    }
    sendJson(res, status, { error: message });
  }
}

/** The copy id `cache-copy` sends with each file it reads, when it is a short token. */
function copyIdOf(req: http.IncomingMessage): string | undefined {
  const id = req.headers[copyIdHeader];
  return typeof id === "string" && /^[A-Za-z0-9-]{1,64}$/.test(id) ? id : undefined;
}

function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new Refusal(400, `"${segment}" is not a URL-encoded path segment`);
  }
}

function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
