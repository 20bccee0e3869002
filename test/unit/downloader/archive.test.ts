import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { archiveKind, type ExtractLimits, extractArchive } from "../../../src/downloader/archive.ts";
import { DownloadError } from "../../../src/downloader/errors.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { type FixtureKind, makeArchive } from "./archive-fixtures.ts";

const limits: ExtractLimits = { maxBytes: 1 << 30, maxRatio: 100, maxEntries: 1000 };

function setup(kind: FixtureKind) {
  const root = scratchDir("archive");
  const out = join(root, "out");
  mkdirSync(out);
  return { root, out, archive: makeArchive(root, kind) };
}

async function refused(kind: FixtureKind, reason: string, message: RegExp, l: ExtractLimits = limits) {
  const { root, out, archive } = setup(kind);
  await assert.rejects(extractArchive(archive, archiveKind(archive)!, out, l), (err: unknown) => {
    assert.ok(err instanceof DownloadError, String(err));
    assert.equal(err.reason, reason);
    assert.match(err.message, message);
    return true;
  });
  // Nothing escaped next to the output directory.
  assert.deepEqual(readdirSync(root).sort(), ["out", archive.slice(root.length + 1)].sort());
  return out;
}

describe("archive extraction", () => {
  it("recognises archive names", () => {
    assert.equal(archiveKind("m.tar.gz"), "tar");
    assert.equal(archiveKind("M.TGZ"), "tar");
    assert.equal(archiveKind("m.tar"), "tar");
    assert.equal(archiveKind("m.zip"), "zip");
    assert.equal(archiveKind("model.safetensors"), undefined);
  });

  for (const kind of ["good-tgz", "good-tar", "good-zip"] as const) {
    it(`unpacks a plain ${kind.slice(5)}`, async () => {
      const { out, archive } = setup(kind);
      await extractArchive(archive, archiveKind(archive)!, out, limits);
      assert.equal(readFileSync(join(out, "model/saved_model.pb"), "utf8"), "pb".repeat(1000));
      assert.equal(readFileSync(join(out, "model/variables/v.index"), "utf8"), "index");
    });
  }

  it('unpacks a tar.gz made with `tar -czf m.tgz -C dir .` (a "./" top entry)', async () => {
    const root = scratchDir("archive");
    const model = join(root, "model");
    mkdirSync(join(model, "sub"), { recursive: true });
    writeFileSync(join(model, "model.bin"), "weights");
    writeFileSync(join(model, "sub", "config.json"), "{}");
    const archive = join(root, "m.tgz");
    execFileSync("tar", ["-czf", archive, "-C", model, "."]);
    assert.match(execFileSync("tar", ["-tzf", archive], { encoding: "utf8" }), /^\.\/$/m);
    const out = join(root, "out");
    mkdirSync(out);
    await extractArchive(archive, "tar", out, limits);
    assert.equal(readFileSync(join(out, "model.bin"), "utf8"), "weights");
    assert.equal(readFileSync(join(out, "sub", "config.json"), "utf8"), "{}");
  });

  it("refuses a tar entry that climbs out with ..", async () => {
    await refused("traversal-tgz", "UnsafeArchive", /archive entry "\.\.\/evil\.txt" climbs out/);
  });
  it("refuses an absolute tar entry", async () => {
    await refused("absolute-tgz", "UnsafeArchive", /is an absolute path/);
    assert.equal(existsSync("/tmp/mlmodel-evil.txt"), false);
  });
  it("refuses symbolic links, before anything is written through them", async () => {
    const out = await refused("symlink-tgz", "UnsafeArchive", /entry "link" is a link/);
    assert.deepEqual(readdirSync(out), []);
  });
  it("refuses hard links", async () => {
    await refused("hardlink-tgz", "UnsafeArchive", /entry "b\.txt" is a link/);
  });
  it("refuses device and FIFO entries", async () => {
    await refused("fifo-tgz", "UnsafeArchive", /entry "pipe" is a device, FIFO/);
  });
  it("refuses a gzip expansion bomb", async () => {
    await refused("bomb-tgz", "UnsafeArchive", /more than 100 times its own size/);
  });
  it("refuses a zip entry that climbs out", async () => {
    await refused("traversal-zip", "UnsafeArchive", /\.\.\/evil\.txt/);
  });
  it("refuses a zip symlink", async () => {
    await refused("symlink-zip", "UnsafeArchive", /entry "link" is a link/);
  });
  it("refuses a zip expansion bomb", async () => {
    await refused("bomb-zip", "UnsafeArchive", /more than 100 times its own size/);
  });
  it("applies the absolute size limit", async () => {
    await refused("good-tgz", "TooLarge", /unpacked size passed 1000 B/, { ...limits, maxBytes: 1000 });
  });
  it("applies the entry count limit", async () => {
    await refused("good-tgz", "UnsafeArchive", /more than 2 entries/, { ...limits, maxEntries: 2 });
  });
  it("says clearly when a .tar.gz is not an archive", async () => {
    await refused("not-an-archive", "UnsafeArchive", /not a readable tar archive/);
  });
});
