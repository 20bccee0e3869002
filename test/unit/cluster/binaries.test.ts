import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  BinaryError,
  binaryNames,
  buildTags,
  checkGoToolchain,
  ensureBinaries,
  ensureNodeBinaries,
  inspectEntry,
  nodeBinaryNames,
  nodeBuildOrder,
  nodeCacheProblem,
  recipes,
  withBuildLock,
} from "../../../src/cluster/binaries.ts";
import { rootOnlyProblem, type StatPath, tightenRootOwned } from "../../../src/cluster/paths.ts";
import { scratchDir } from "../../harness/scratch.ts";

const etcdRecipe = recipes.find((r) => r.binaries.includes("etcd"))!;

describe("binary cache entries", () => {
  const entry = (files: Record<string, string>) => {
    const dir = join(scratchDir("cache"), etcdRecipe.key);
    mkdirSync(dir);
    for (const [name, content] of Object.entries(files))
      writeFileSync(join(dir, name), content, { mode: 0o755 });
    return dir;
  };
  const digest = "0".repeat(64);

  it("is missing when its dir does not exist", async () => {
    assert.deepEqual(await inspectEntry(join(tmpdir(), "no-such-mlmodel-entry"), etcdRecipe), {
      state: "missing",
    });
  });

  it("is corrupted without a manifest (an interrupted build)", async () => {
    const result = await inspectEntry(entry({ etcd: "fake etcd\n" }), etcdRecipe);
    assert.equal(result.state, "corrupted");
  });

  it("is corrupted when a binary does not match its digest", async () => {
    const manifest = JSON.stringify({
      key: etcdRecipe.key,
      digests: { etcd: digest },
      goVersion: "go1.26",
      buildSeconds: 1,
    });
    const result = await inspectEntry(entry({ etcd: "truncated", "manifest.json": manifest }), etcdRecipe);
    assert.deepEqual(result, { state: "corrupted", why: "etcd does not match its recorded sha256" });
  });

  it("is ok when every digest matches", async () => {
    const { createHash } = await import("node:crypto");
    const real = createHash("sha256").update("fake etcd\n").digest("hex");
    const manifest = JSON.stringify({
      key: etcdRecipe.key,
      digests: { etcd: real },
      goVersion: "go1.26",
      buildSeconds: 1,
    });
    assert.deepEqual(
      await inspectEntry(entry({ etcd: "fake etcd\n", "manifest.json": manifest }), etcdRecipe),
      { state: "ok" },
    );
  });
});

describe("the control plane's binaries", () => {
  async function withCache<T>(env: Record<string, string>, fn: (cache: string) => Promise<T>): Promise<T> {
    const cache = scratchDir("controlplane-cache");
    const saved = { MLMODEL_CACHE_DIR: process.env.MLMODEL_CACHE_DIR, PATH: process.env.PATH };
    Object.assign(process.env, { MLMODEL_CACHE_DIR: cache, ...env });
    try {
      return await fn(cache);
    } finally {
      for (const [name, value] of Object.entries(saved))
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
    }
  }

  it("takes every binary from its recipe's entry when all are cached", async () => {
    const { createHash } = await import("node:crypto");
    await withCache({}, async (cache) => {
      for (const recipe of recipes) {
        const dir = join(cache, "controlplane", recipe.key);
        mkdirSync(dir, { recursive: true });
        const digests: Record<string, string> = {};
        for (const name of recipe.binaries) {
          writeFileSync(join(dir, name), `fake ${name}\n`, { mode: 0o755 });
          digests[name] = createHash("sha256").update(`fake ${name}\n`).digest("hex");
        }
        writeFileSync(join(dir, "manifest.json"), JSON.stringify({ key: recipe.key, digests }));
      }
      const paths = await ensureBinaries();
      assert.deepEqual(Object.keys(paths).sort(), [...binaryNames].sort());
      for (const recipe of recipes)
        for (const name of recipe.binaries)
          assert.equal(paths[name as keyof typeof paths], join(cache, "controlplane", recipe.key, name));
    });
  });

  it("fails with the build's error when one cannot be built, after the others settle", async () => {
    await withCache({ PATH: "/nonexistent" }, async (cache) => {
      await assert.rejects(ensureBinaries(), (err: Error) => {
        assert.ok(err instanceof BinaryError, String(err));
        assert.match(err.message, /no Go toolchain was found on PATH/);
        return true;
      });
      for (const recipe of recipes)
        assert.equal(existsSync(join(cache, "controlplane", `${recipe.key}.lock`)), false, recipe.key);
    });
  });
});

describe("Go toolchain check", () => {
  it("says what to install when go is not on PATH", () => {
    const path = process.env.PATH;
    process.env.PATH = "/nonexistent";
    try {
      assert.throws(checkGoToolchain, (err: Error) => {
        assert.ok(err instanceof BinaryError);
        assert.match(err.message, /no Go toolchain was found on PATH/);
        assert.match(err.message, /MLMODEL_CONTROLPLANE_BIN_DIR/);
        return true;
      });
    } finally {
      process.env.PATH = path;
    }
  });
});

describe("directories the real node runs from as root", () => {
  const fakeTree =
    (entries: Record<string, { uid: number; mode: number }>): StatPath =>
    async (path) => {
      const entry = entries[path];
      assert.ok(entry, `stat of an unexpected path ${path}`);
      return { ...entry, isDirectory: true };
    };
  const same = async (path: string) => path;
  const rootDirs = { "/": { uid: 0, mode: 0o755 }, "/root": { uid: 0, mode: 0o700 } };

  it("accepts a root-owned 0700 directory under parents only root can write (sticky ones too)", async () => {
    const tree = fakeTree({
      ...rootDirs,
      "/root/cache": { uid: 0, mode: 0o700 },
      "/tmp": { uid: 0, mode: 0o1777 },
      "/tmp/c1": { uid: 0, mode: 0o700 },
    });
    assert.equal(await rootOnlyProblem("the cache", "/root/cache", tree, same), undefined);
    assert.equal(await rootOnlyProblem("the cache", "/tmp/c1", tree, same), undefined);
  });

  it("refuses one owned by another user, or open to others, naming the path, its owner and mode, and the fix", async () => {
    const tree = fakeTree({
      ...rootDirs,
      "/root/theirs": { uid: 1000, mode: 0o700 },
      "/root/open": { uid: 0, mode: 0o755 },
    });
    assert.equal(
      await rootOnlyProblem("the cache", "/root/theirs", tree, same),
      "the cache /root/theirs is owned by uid 1000 with mode 0700: the real node runs as root what it holds, so it must be root-owned with mode 0700 (fix: chown root:root /root/theirs && chmod 0700 /root/theirs)",
    );
    assert.match(
      (await rootOnlyProblem("the cache", "/root/open", tree, same)) ?? "",
      /^the cache \/root\/open is owned by uid 0 with mode 0755: .* chmod 0700 \/root\/open\)$/,
    );
  });

  it("refuses one inside a directory another user owns or can write (they could swap it)", async () => {
    const tree = fakeTree({
      "/": { uid: 0, mode: 0o755 },
      "/shared": { uid: 0, mode: 0o777 },
      "/shared/c": { uid: 0, mode: 0o700 },
      "/home": { uid: 0, mode: 0o755 },
      "/home/alice": { uid: 1000, mode: 0o755 },
      "/home/alice/c": { uid: 0, mode: 0o700 },
    });
    assert.match(
      (await rootOnlyProblem("the cache", "/shared/c", tree, same)) ?? "",
      /is inside \/shared, owned by uid 0 with mode 0777: a user other than root could replace \/shared\/c/,
    );
    assert.match(
      (await rootOnlyProblem("the cache", "/home/alice/c", tree, same)) ?? "",
      /is inside \/home\/alice, owned by uid 1000 with mode 0755/,
    );
  });

  it("checks where a symlink leads, and says so", async () => {
    const tree = fakeTree({ ...rootDirs, "/root/real": { uid: 0, mode: 0o755 } });
    const problem = await rootOnlyProblem("the cache", "/root/link", tree, async () => "/root/real");
    assert.match(problem ?? "", /^the cache \/root\/link \(\/root\/real\) is owned by uid 0 with mode 0755/);
  });

  it("tightens a cache made before the rule when nobody but root can have written it, and only then", async () => {
    const base = scratchDir("tighten");
    const made = (name: string, mode: number) => {
      const dir = join(base, name);
      mkdirSync(dir);
      chmodSync(dir, mode);
      return dir;
    };
    const old = made("old", 0o755);
    const open = made("open", 0o775);
    const stat = async (path: string) => {
      const st = statSync(path);
      // As if root owned them, whoever runs this test.
      return { uid: 0, mode: st.mode, isDirectory: st.isDirectory() };
    };
    assert.equal(await tightenRootOwned(old, stat), true);
    assert.equal(statSync(old).mode & 0o777, 0o700);
    assert.equal(
      await tightenRootOwned(open, stat),
      false,
      "group-writable: someone else may have written it",
    );
    assert.equal(statSync(open).mode & 0o777, 0o775);
    assert.equal(await tightenRootOwned(old, stat), false, "already 0700");
  });

  it("finds the binary cache's problem before the real node trusts a manifest in it", async () => {
    const cache = scratchDir("node-cache");
    mkdirSync(join(cache, "controlplane"), { mode: 0o700 });
    chmodSync(join(cache, "controlplane"), 0o777);
    const saved = process.env.MLMODEL_CACHE_DIR;
    process.env.MLMODEL_CACHE_DIR = cache;
    try {
      assert.match(
        (await nodeCacheProblem()) ?? "",
        new RegExp(`^the binary cache ${join(cache, "controlplane")} is owned by uid \\d+ with mode 0777`),
      );
      await assert.rejects(ensureNodeBinaries(), (err: Error) => {
        assert.ok(err instanceof BinaryError);
        assert.match(err.message, /with mode 0777: the real node runs as root what it holds/);
        return true;
      });
    } finally {
      if (saved === undefined) delete process.env.MLMODEL_CACHE_DIR;
      else process.env.MLMODEL_CACHE_DIR = saved;
    }
  });
});

describe("the real node's build order", () => {
  it("builds kubelet and kube-proxy after the control plane's Kubernetes binaries, with the same flags, the rest before", () => {
    const order = nodeBuildOrder();
    const keys = order.map((r) => r.key);
    const controlPlane = recipes.find((r) => r.binaries.includes("kube-apiserver"))!;
    const node = order.find((r) => r.binaries.includes("kubelet"))!;
    assert.ok(keys.indexOf(controlPlane.key) < keys.indexOf(node.key), keys.join(", "));
    assert.equal(keys.at(-1), node.key);
    // Go reuses a compiled package only when it is built from the same module with the same flags.
    assert.equal(node.moduleDir, controlPlane.moduleDir);
    assert.deepEqual(node.ldflags, controlPlane.ldflags);
    assert.equal(buildTags(node), buildTags(controlPlane));
    assert.deepEqual(
      order
        .flatMap((r) => r.binaries)
        .filter((b) => (nodeBinaryNames as readonly string[]).includes(b))
        .sort(),
      [...nodeBinaryNames].sort(),
      "every binary of the node is built",
    );
  });

  it("says who holds a build's lock while it waits for it, once", async () => {
    const dir = join(scratchDir("lock"), "entry");
    const holder = spawn("sleep", ["30"], { stdio: "ignore" });
    writeFileSync(`${dir}.lock`, String(holder.pid));
    const heard: number[] = [];
    let ran = false;
    const locked = withBuildLock(
      dir,
      async () => {
        ran = true;
      },
      (pid) => heard.push(pid),
    );
    await waitUntil(() => heard.length > 0);
    assert.equal(ran, false, "not while another process holds the lock");
    holder.kill();
    await locked;
    assert.deepEqual([heard, ran], [[holder.pid], true]);
  });
});

async function waitUntil(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 20));
}
