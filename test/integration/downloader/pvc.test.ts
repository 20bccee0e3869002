// pvc://claim/path: the claim is mounted (here: a directory as MLMODEL_PVC_ROOT/<claim>); the
// downloader checks presence and digest, copies nothing and needs no --dest.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import { runDownload, tempDir } from "./servers.ts";

describe("pvc:// (mounted, verified in place)", () => {
  let root: string;
  before(() => {
    root = tempDir("pvc");
    mkdirSync(join(root, "models-claim", "resnet", "1"), { recursive: true });
    writeFileSync(join(root, "models-claim", "resnet", "1", "saved_model.pb"), "pb");
    writeFileSync(join(root, "models-claim", "resnet", "labels.txt"), "cat\ndog\n");
    mkdirSync(join(root, "models-claim", "empty"));
  });

  it("verifies a mounted directory against the tree digest and copies nothing", async () => {
    const dir = join(root, "models-claim", "resnet");
    const digest = execFileSync(
      "bash",
      ["-c", "find . -type f -printf '%P\\n' | LC_ALL=C sort | xargs sha256sum | sha256sum"],
      { cwd: dir },
    )
      .toString()
      .split(" ")[0]!;
    const res = await runDownload(["--uri", "pvc://models-claim/resnet", "--sha256", digest], {
      MLMODEL_PVC_ROOT: root,
    });
    assert.equal(res.code, 0, res.stderr);
    assert.match(res.stderr, new RegExp(`verified in place: ${dir} \\(sha256 ${digest}\\)`));
    assert.deepEqual(readdirSync(root), ["models-claim"], "nothing written beside the claim");
  });

  it("fails a wrong digest", async () => {
    const res = await runDownload(["--uri", "pvc://models-claim/resnet", "--sha256", "0".repeat(64)], {
      MLMODEL_PVC_ROOT: root,
    });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /ChecksumMismatch: the tree of 2 files has sha256 [0-9a-f]{64}, expected 0{64}/);
  });

  it("names a missing path and where it looked", async () => {
    const res = await runDownload(["--uri", "pvc://models-claim/nope"], { MLMODEL_PVC_ROOT: root });
    assert.equal(res.code, 1);
    assert.match(
      res.stderr,
      /NotFound: .*models-claim\/nope does not exist; check that claim models-claim holds nope and is mounted at /,
    );
  });

  it("refuses an empty directory", async () => {
    const res = await runDownload(["--uri", "pvc://models-claim/empty"], { MLMODEL_PVC_ROOT: root });
    assert.equal(res.code, 1);
    assert.match(res.stderr, /NotFound: .*empty is an empty directory/);
  });
});
