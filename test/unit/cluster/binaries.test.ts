import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { BinaryError, checkGoToolchain, inspectEntry, recipes } from "../../../src/cluster/binaries.ts";
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
