// The node cache's content store on one directory:
//   DIR/entries/KEY/entry.json   the manifest, where it came from, lastUsedAt
//   DIR/entries/KEY/files/PATH   the entry's files
//   DIR/staging/KEY.RANDOM/...   an upload or peer copy being received (same layout)
// An entry is published by renaming its staging directory into entries/, with entry.json
// already inside, so an entry is complete or absent, whatever moment the agent dies at.
import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { listFiles, sha256OfFile } from "../downloader/digest.ts";
import type { EntryFile, EntryManifest, NodeCacheEntry } from "./contract.ts";

export interface StoredEntry {
  manifest: EntryManifest;
  source: NodeCacheEntry["source"];
  peer?: string;
  completedAt: string;
  lastUsedAt: string;
}

export interface EntryOrigin {
  source: NodeCacheEntry["source"];
  peer?: string;
}

const entryFileName = "entry.json";
const filesDirName = "files";

/** An entry whose size cannot fit the budget even once every evictable entry is gone. */
export class NoRoomError extends Error {
  constructor(key: string, size: number, budget: number, keptBytes: number, reservedBytes = 0) {
    const reserved = reservedBytes > 0 ? ` and ${reservedBytes} by other copies in progress` : "";
    super(
      `entry ${key} needs ${size} bytes; the budget is ${budget} bytes, of which ${keptBytes} are held by entries in use${
        keptBytes > 0 ? " (never evicted)" : ""
      }${reserved}: raise --budget (the DaemonSet's cache size) or free the entries in use`,
    );
    this.name = "NoRoomError";
  }
}

/** A manifest, path or staged file that does not match what was promised. */
export class EntryInvalidError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EntryInvalidError";
  }
}

/** KEY as cacheKey makes it (lowercase hex), or any label-value-like name: never a path. */
export function validKey(key: string): boolean {
  return /^[a-z0-9][a-z0-9-]{0,62}$/.test(key);
}

/** A relative "/"-separated path with no empty, "." or ".." segment. */
export function validRelativePath(path: string): boolean {
  if (path === "" || path.startsWith("/") || path.includes("\\") || path.includes("\0")) return false;
  return path.split("/").every((s) => s !== "" && s !== "." && s !== "..");
}

/** Checks a manifest's shape; throws EntryInvalidError naming the field that is wrong. */
export function checkManifest(key: string, value: unknown): EntryManifest {
  const m = value as Partial<EntryManifest> | null;
  const fail = (what: string) => {
    throw new EntryInvalidError(`manifest of ${key}: ${what}`);
  };
  if (!m || typeof m !== "object") return fail("not a JSON object");
  if (m.key !== key) fail(`key "${String(m.key)}" is not the entry's key "${key}"`);
  if (typeof m.uri !== "string") fail("uri must be a string");
  if (!Array.isArray(m.files) || m.files.length === 0) fail("files must be a non-empty list");
  const seen = new Set<string>();
  let sum = 0;
  for (const f of m.files as EntryFile[]) {
    if (!f || typeof f.path !== "string" || !validRelativePath(f.path))
      fail(`file path "${String(f?.path)}" must be relative, "/"-separated, without "." or ".."`);
    if (seen.has(f.path)) fail(`file path "${f.path}" is listed twice`);
    seen.add(f.path);
    if (!Number.isSafeInteger(f.size) || f.size < 0) fail(`size of "${f.path}" must be a whole number >= 0`);
    if (typeof f.sha256 !== "string" || !/^[0-9a-f]{64}$/.test(f.sha256))
      fail(`sha256 of "${f.path}" must be 64 lowercase hex characters`);
    sum += f.size;
  }
  if (m.size !== sum) fail(`size ${String(m.size)} is not the sum of the files' sizes (${sum})`);
  return { key, uri: m.uri as string, files: m.files as EntryFile[], size: sum };
}

/**
 * Which entries to evict so that `size` more bytes fit beside `reserved` bytes being received
 * for other entries: least recently used first, never one in `keep`. Throws NoRoomError when
 * even evicting every other entry leaves too little room.
 */
export function planEviction(
  entries: readonly StoredEntry[],
  size: number,
  budget: number,
  keep: ReadonlySet<string>,
  key: string,
  reserved = 0,
): string[] {
  const used = entries.reduce((s, e) => s + e.manifest.size, 0);
  const kept = entries.filter((e) => keep.has(e.manifest.key)).reduce((s, e) => s + e.manifest.size, 0);
  if (kept + reserved + size > budget) throw new NoRoomError(key, size, budget, kept, reserved);
  const candidates = entries
    .filter((e) => !keep.has(e.manifest.key))
    .sort((a, b) => (a.lastUsedAt < b.lastUsedAt ? -1 : a.lastUsedAt > b.lastUsedAt ? 1 : 0));
  const evict: string[] = [];
  let free = budget - used - reserved;
  for (const e of candidates) {
    if (free >= size) break;
    evict.push(e.manifest.key);
    free += e.manifest.size;
  }
  return evict;
}

/**
 * The keys never to evict: a set, or a function asked only when something must be evicted (so
 * the agent reads the pods on its node only then, and never with a stale answer).
 */
export type KeepSource = ReadonlySet<string> | (() => Promise<ReadonlySet<string>>);

export class ContentStore {
  readonly dir: string;
  readonly budgetBytes: number;
  readonly #entries = new Map<string, StoredEntry>();
  readonly #now: () => Date;
  /** Commits and reservations run one at a time: each plans on the entries the last one left. */
  #commits: Promise<unknown> = Promise.resolve();
  /** Bytes being received (uploads, peer copies) that the budget must leave room for. */
  #reserved = 0;
  evictions = 0;

  private constructor(dir: string, budgetBytes: number, now: () => Date) {
    this.dir = dir;
    this.budgetBytes = budgetBytes;
    this.#now = now;
  }

  /**
   * Opens (or creates) the store: reads every published entry, drops what an earlier run left
   * half done (staging directories, an entry without a readable entry.json).
   */
  static async open(
    dir: string,
    budgetBytes: number,
    now: () => Date = () => new Date(),
  ): Promise<ContentStore> {
    const store = new ContentStore(dir, budgetBytes, now);
    await rm(store.#stagingRoot(), { recursive: true, force: true });
    await mkdir(store.#stagingRoot(), { recursive: true });
    await mkdir(store.#entriesRoot(), { recursive: true });
    for (const name of await readdir(store.#entriesRoot())) {
      const entry = await readEntry(join(store.#entriesRoot(), name));
      if (entry && entry.manifest.key === name) store.#entries.set(name, entry);
      else await rm(join(store.#entriesRoot(), name), { recursive: true, force: true });
    }
    return store;
  }

  get usedBytes(): number {
    let sum = 0;
    for (const e of this.#entries.values()) sum += e.manifest.size;
    return sum;
  }

  entry(key: string): StoredEntry | undefined {
    return this.#entries.get(key);
  }

  entries(): StoredEntry[] {
    return [...this.#entries.values()];
  }

  /** The file's path on disk; undefined when the entry or the file is not in it. */
  filePath(key: string, path: string): string | undefined {
    const e = this.#entries.get(key);
    if (!e?.manifest.files.some((f) => f.path === path)) return undefined;
    return join(this.#entriesRoot(), key, filesDirName, path);
  }

  /** A fresh staging directory for KEY; files go under stagedPath(staging, path). */
  async newStaging(key: string): Promise<string> {
    const staging = join(this.#stagingRoot(), `${key}.${randomBytes(6).toString("hex")}`);
    await mkdir(join(staging, filesDirName), { recursive: true });
    return staging;
  }

  stagedPath(staging: string, path: string): string {
    if (!validRelativePath(path)) throw new EntryInvalidError(`file path "${path}" is not a relative path`);
    return join(staging, filesDirName, path);
  }

  async discardStaging(staging: string): Promise<void> {
    await rm(staging, { recursive: true, force: true });
  }

  /**
   * Verifies the staged files against the manifest (the same set of paths, each size and
   * sha256; `hashes` holds digests computed while the bytes arrived, the others are read
   * again), makes room, and publishes the entry. The staging directory is gone afterwards.
   * `reservedBytes`: what reserve() holds for this entry (the caller releases it after).
   */
  async commit(
    staging: string,
    manifest: EntryManifest,
    origin: EntryOrigin,
    keep: KeepSource,
    hashes: ReadonlyMap<string, string> = new Map(),
    reservedBytes = 0,
  ): Promise<{ entry: StoredEntry; evicted: string[] }> {
    return this.#serially(() => this.#commit(staging, manifest, origin, keep, hashes, reservedBytes));
  }

  /**
   * Makes room for `bytes` about to be received for KEY (evicting as a commit would) and holds
   * it until release(), so the directory never outgrows the budget while copies are under way.
   * Throws NoRoomError when they cannot fit.
   */
  reserve(key: string, bytes: number, keep: KeepSource): Promise<string[]> {
    return this.#serially(async () => {
      const kept = await this.#keepFor(bytes, this.#reserved, keep);
      const evicted = planEviction(this.entries(), bytes, this.budgetBytes, kept, key, this.#reserved);
      for (const k of evicted) await this.drop(k, true);
      this.#reserved += bytes;
      return evicted;
    });
  }

  release(bytes: number): void {
    this.#reserved = Math.max(0, this.#reserved - bytes);
  }

  get reservedBytes(): number {
    return this.#reserved;
  }

  /** The keys to keep; a function is asked only when `bytes` do not fit without evicting. */
  async #keepFor(bytes: number, reserved: number, keep: KeepSource): Promise<ReadonlySet<string>> {
    if (typeof keep !== "function") return keep;
    return this.usedBytes + reserved + bytes <= this.budgetBytes ? new Set() : keep();
  }

  #serially<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#commits.then(work);
    this.#commits = run.catch(() => {});
    return run;
  }

  async #commit(
    staging: string,
    manifest: EntryManifest,
    origin: EntryOrigin,
    keep: KeepSource,
    hashes: ReadonlyMap<string, string>,
    reservedBytes: number,
  ): Promise<{ entry: StoredEntry; evicted: string[] }> {
    try {
      const existing = this.#entries.get(manifest.key);
      if (existing) return { entry: existing, evicted: [] };
      await this.#checkStaged(staging, manifest, hashes);
      // The entry's own reservation is room it may take; the others' is not.
      const others = Math.max(0, this.#reserved - reservedBytes);
      const kept = await this.#keepFor(manifest.size, others, keep);
      const evicted = planEviction(
        this.entries(),
        manifest.size,
        this.budgetBytes,
        kept,
        manifest.key,
        others,
      );
      for (const key of evicted) await this.drop(key, true);
      const at = this.#now().toISOString();
      const entry: StoredEntry = { manifest, ...origin, completedAt: at, lastUsedAt: at };
      await writeFile(join(staging, entryFileName), JSON.stringify(entry));
      await rename(staging, join(this.#entriesRoot(), manifest.key));
      this.#entries.set(manifest.key, entry);
      return { entry, evicted };
    } finally {
      await this.discardStaging(staging);
    }
  }

  /** Records a use (an ensure): the entry moves to the back of the eviction order. */
  async touch(key: string): Promise<void> {
    const e = this.#entries.get(key);
    if (!e) return;
    e.lastUsedAt = this.#now().toISOString();
    const path = join(this.#entriesRoot(), key, entryFileName);
    await writeFile(`${path}.tmp`, JSON.stringify(e));
    await rename(`${path}.tmp`, path);
  }

  /**
   * Reads every file of the entry again; a missing file, a wrong size or sha256 drops the entry
   * (it is fetched again from a peer or the origin). Returns what was wrong, or undefined.
   */
  async reverify(key: string): Promise<string | undefined> {
    const e = this.#entries.get(key);
    if (!e) return undefined;
    const root = join(this.#entriesRoot(), key, filesDirName);
    let problem: string | undefined;
    for (const f of e.manifest.files) {
      problem = await fileProblem(join(root, f.path), f);
      if (problem) break;
    }
    if (problem) await this.drop(key, false);
    return problem;
  }

  /** Removes the entry; `evicted` counts it as an eviction (a corrupt entry is not one). */
  async drop(key: string, evicted: boolean): Promise<void> {
    if (!this.#entries.delete(key)) return;
    if (evicted) this.evictions++;
    // Renamed out of entries/ first, so a crash mid-delete leaves no half entry behind.
    const trash = join(this.#stagingRoot(), `${key}.dropped.${randomBytes(4).toString("hex")}`);
    await rename(join(this.#entriesRoot(), key), trash);
    await rm(trash, { recursive: true, force: true });
  }

  async #checkStaged(staging: string, m: EntryManifest, hashes: ReadonlyMap<string, string>): Promise<void> {
    const root = join(staging, filesDirName);
    const staged = new Set(await listFiles(root));
    const missing = m.files.filter((f) => !staged.has(f.path)).map((f) => f.path);
    if (missing.length > 0)
      throw new EntryInvalidError(
        `entry ${m.key}: ${missing.length} file(s) not uploaded: ${missing.slice(0, 5).join(", ")}`,
      );
    const listed = new Set(m.files.map((f) => f.path));
    const extra = [...staged].filter((p) => !listed.has(p));
    if (extra.length > 0)
      throw new EntryInvalidError(
        `entry ${m.key}: file(s) not in the manifest: ${extra.slice(0, 5).join(", ")}`,
      );
    for (const f of m.files) {
      const problem = await fileProblem(join(root, f.path), f, hashes.get(f.path));
      if (problem) throw new EntryInvalidError(`entry ${m.key}: ${problem}`);
    }
  }

  #entriesRoot(): string {
    return join(this.dir, "entries");
  }

  #stagingRoot(): string {
    return join(this.dir, "staging");
  }
}

/** What is wrong with the file on disk against its manifest line, or undefined. */
async function fileProblem(path: string, f: EntryFile, knownSha256?: string): Promise<string | undefined> {
  const info = await stat(path).catch(() => undefined);
  if (!info?.isFile()) return `${f.path} is missing`;
  if (info.size !== f.size) return `${f.path} has ${info.size} bytes, the manifest says ${f.size}`;
  const sha256 = knownSha256 ?? (await sha256OfFile(path));
  if (sha256 !== f.sha256) return `${f.path} has sha256 ${sha256}, the manifest says ${f.sha256}`;
  return undefined;
}

async function readEntry(dir: string): Promise<StoredEntry | undefined> {
  try {
    const e = JSON.parse(await readFile(join(dir, entryFileName), "utf8")) as StoredEntry;
    return e?.manifest && Array.isArray(e.manifest.files) ? e : undefined;
  } catch {
    return undefined;
  }
}
