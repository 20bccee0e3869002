// The node cache's content store on real temporary directories: publish by rename, verify on
// commit, LRU eviction that keeps entries in use, re-verify dropping a corrupt entry, reopen.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import type { EntryManifest } from "../../../src/nodecache/contract.ts";
import {
  ContentStore,
  checkManifest,
  EntryInvalidError,
  NoRoomError,
  planEviction,
  type StoredEntry,
  validRelativePath,
} from "../../../src/nodecache/store.ts";

const root = mkdtempSync(join(tmpdir(), "nodecache-store-"));
after(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const freshDir = () => join(root, `s${dirs++}`);

function manifestOf(key: string, files: Record<string, string>): EntryManifest {
  const list = Object.entries(files).map(([path, content]) => ({
    path,
    size: Buffer.byteLength(content),
    sha256: createHash("sha256").update(content).digest("hex"),
  }));
  return { key, uri: `https://origin/${key}`, files: list, size: list.reduce((s, f) => s + f.size, 0) };
}

async function stage(store: ContentStore, key: string, files: Record<string, string>): Promise<string> {
  const staging = await store.newStaging(key);
  for (const [path, content] of Object.entries(files)) {
    const target = store.stagedPath(staging, path);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, content);
  }
  return staging;
}

async function put(
  store: ContentStore,
  key: string,
  files: Record<string, string>,
  keep = new Set<string>(),
) {
  return store.commit(await stage(store, key, files), manifestOf(key, files), { source: "origin" }, keep);
}

/** A clock the test moves: lastUsedAt orders eviction. */
function steppingClock() {
  let t = Date.parse("2026-01-01T00:00:00Z");
  return () => {
    t += 1000;
    return new Date(t);
  };
}

describe("node cache store", () => {
  it("publishes a verified entry and finds it again after a reopen", async () => {
    const dir = freshDir();
    const store = await ContentStore.open(dir, 1000);
    const { entry, evicted } = await put(store, "aaa", { "model.bin": "weights", "cfg/a.json": "{}" });
    assert.deepEqual(evicted, []);
    assert.equal(entry.manifest.size, 9);
    assert.equal(store.usedBytes, 9);
    assert.ok(store.filePath("aaa", "cfg/a.json"));
    assert.equal(store.filePath("aaa", "nope"), undefined);
    assert.deepEqual(readdirSync(join(dir, "staging")), [], "staging is emptied by the commit");
    const reopened = await ContentStore.open(dir, 1000);
    assert.deepEqual(reopened.entry("aaa")?.manifest, entry.manifest);
  });

  it("refuses a staged tree that does not match the manifest, and keeps nothing of it", async () => {
    const store = await ContentStore.open(freshDir(), 1000);
    const m = manifestOf("bbb", { a: "right" });
    const bad = await stage(store, "bbb", { a: "wrong" });
    await assert.rejects(
      store.commit(bad, m, { source: "origin" }, new Set()),
      /a has sha256 [0-9a-f]+, the manifest says/,
    );
    const missing = await stage(store, "bbb", {});
    await assert.rejects(
      store.commit(missing, m, { source: "origin" }, new Set()),
      /1 file\(s\) not uploaded: a/,
    );
    const extra = await stage(store, "bbb", { a: "right", b: "x" });
    await assert.rejects(store.commit(extra, m, { source: "origin" }, new Set()), /not in the manifest: b/);
    assert.equal(store.entry("bbb"), undefined);
    assert.equal(store.usedBytes, 0);
  });

  it("evicts least recently used entries to fit, never one in use", async () => {
    const store = await ContentStore.open(freshDir(), 30, steppingClock());
    await put(store, "old", { f: "x".repeat(10) });
    await put(store, "used", { f: "y".repeat(10) });
    await put(store, "mid", { f: "z".repeat(10) });
    await store.touch("old"); // now "used" is the least recently used, "mid" next
    const { evicted } = await put(store, "new", { f: "n".repeat(15) }, new Set(["used"]));
    assert.deepEqual(evicted, ["mid", "old"]);
    assert.deepEqual(
      store
        .entries()
        .map((e) => e.manifest.key)
        .sort(),
      ["new", "used"],
    );
    assert.equal(store.evictions, 2);
    assert.ok(store.usedBytes <= store.budgetBytes);
  });

  it("refuses an entry that cannot fit even after evicting everything evictable", async () => {
    const store = await ContentStore.open(freshDir(), 30);
    await put(store, "pinned", { f: "p".repeat(20) });
    await put(store, "other", { f: "o".repeat(5) });
    await assert.rejects(put(store, "big", { f: "b".repeat(11) }, new Set(["pinned"])), (err: unknown) => {
      assert.ok(err instanceof NoRoomError);
      assert.match(
        err.message,
        /needs 11 bytes; the budget is 30 bytes, of which 20 are held by entries in use/,
      );
      return true;
    });
    assert.ok(store.entry("other"), "nothing is evicted for an entry that cannot fit");
    assert.equal(store.evictions, 0);
  });

  it("reserves room for bytes being received, so the directory never outgrows the budget", async () => {
    const store = await ContentStore.open(freshDir(), 100, steppingClock());
    await put(store, "old", { f: "o".repeat(30) });
    assert.deepEqual(await store.reserve("incoming", 60, new Set()), []);
    await assert.rejects(store.reserve("second", 50, new Set(["old"])), /and 60 by other copies in progress/);
    assert.deepEqual(await store.reserve("second", 30, new Set()), ["old"], "room comes from evicting");
    assert.equal(store.usedBytes + store.reservedBytes, 90);
    // The reserved entry commits into its own reservation, beside the other one.
    const m = manifestOf("incoming", { f: "i".repeat(60) });
    await store.commit(
      await stage(store, "incoming", { f: "i".repeat(60) }),
      m,
      { source: "peer" },
      new Set(),
      new Map(),
      60,
    );
    store.release(60);
    store.release(30);
    assert.equal(store.reservedBytes, 0);
    assert.equal(store.usedBytes, 60);
  });

  it("asks for the keys in use only when something must be evicted", async () => {
    const store = await ContentStore.open(freshDir(), 50, steppingClock());
    let asked = 0;
    const keep = async () => {
      asked++;
      return new Set(["a"]);
    };
    const files = (c: string) => ({ f: c.repeat(20) });
    await store.commit(
      await stage(store, "a", files("a")),
      manifestOf("a", files("a")),
      { source: "origin" },
      keep,
    );
    await store.commit(
      await stage(store, "b", files("b")),
      manifestOf("b", files("b")),
      { source: "origin" },
      keep,
    );
    assert.equal(asked, 0, "both fit without evicting");
    const { evicted } = await store.commit(
      await stage(store, "c", files("c")),
      manifestOf("c", files("c")),
      { source: "origin" },
      keep,
    );
    assert.equal(asked, 1);
    assert.deepEqual(evicted, ["b"], "a is older but in use");
  });

  it("fits a budget lowered since the last run by evicting the least recently used", async () => {
    const dir = freshDir();
    const big = await ContentStore.open(dir, 100, steppingClock());
    await put(big, "first", { f: "1".repeat(30) });
    await put(big, "second", { f: "2".repeat(30) });
    const small = await ContentStore.open(dir, 40, steppingClock());
    assert.deepEqual(await small.reserve("budget", 0, new Set()), ["first"]);
    assert.equal(small.usedBytes, 30);
    assert.equal(small.reservedBytes, 0);
  });

  it("drops an entry whose file changed on disk when re-verified", async () => {
    const dir = freshDir();
    const store = await ContentStore.open(dir, 100);
    await put(store, "ccc", { "w.bin": "good bytes" });
    assert.equal(await store.reverify("ccc"), undefined);
    writeFileSync(store.filePath("ccc", "w.bin")!, "evil bytes");
    assert.match((await store.reverify("ccc")) ?? "", /w\.bin has sha256 [0-9a-f]+, the manifest says/);
    assert.equal(store.entry("ccc"), undefined);
    assert.equal(store.evictions, 0, "a corrupt entry is dropped, not counted as evicted");
    assert.deepEqual(readdirSync(join(dir, "entries")), []);
  });

  it("drops half-published leftovers when it opens", async () => {
    const dir = freshDir();
    mkdirSync(join(dir, "entries", "half", "files"), { recursive: true });
    mkdirSync(join(dir, "staging", "x.123", "files"), { recursive: true });
    const store = await ContentStore.open(dir, 100);
    assert.deepEqual(store.entries(), []);
    assert.deepEqual(readdirSync(join(dir, "entries")), []);
    assert.deepEqual(readdirSync(join(dir, "staging")), []);
  });

  it("plans eviction oldest first and only as much as needed", () => {
    const e = (key: string, size: number, lastUsedAt: string): StoredEntry => ({
      manifest: { key, uri: "", files: [], size },
      source: "origin",
      completedAt: lastUsedAt,
      lastUsedAt,
    });
    const all = [e("a", 10, "2026-01-03"), e("b", 10, "2026-01-01"), e("c", 10, "2026-01-02")];
    assert.deepEqual(planEviction(all, 5, 35, new Set(), "n"), []);
    assert.deepEqual(planEviction(all, 10, 35, new Set(), "n"), ["b"]);
    assert.deepEqual(planEviction(all, 20, 35, new Set(["b"]), "n"), ["c", "a"]);
    assert.throws(() => planEviction(all, 30, 35, new Set(["b"]), "n"), NoRoomError);
  });

  it("checks manifests field by field", () => {
    const good = manifestOf("k", { a: "1" });
    assert.deepEqual(checkManifest("k", good), good);
    const bad = (m: unknown, re: RegExp) =>
      assert.throws(
        () => checkManifest("k", m),
        (err: unknown) => err instanceof EntryInvalidError && re.test(err.message),
      );
    bad({ ...good, key: "z" }, /key "z" is not the entry's key "k"/);
    bad({ ...good, size: 7 }, /size 7 is not the sum of the files' sizes \(1\)/);
    bad({ ...good, files: [{ ...good.files[0], path: "../x" }] }, /file path "\.\.\/x" must be relative/);
    bad({ ...good, files: [{ ...good.files[0], sha256: "ABC" }] }, /sha256 of "a" must be 64 lowercase hex/);
    bad({ ...good, files: [] }, /files must be a non-empty list/);
    assert.equal(validRelativePath("a/b.c"), true);
    for (const p of ["", "/a", "a//b", "a/./b", "a/../b", "a\\b"])
      assert.equal(validRelativePath(p), false, p);
  });
});
