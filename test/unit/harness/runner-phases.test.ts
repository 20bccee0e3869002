// test-needs: own-real-node
/**
 * scripts/test.ts runs files that start real nodes of their own in a phase after the others,
 * and files with live traffic in a lane beside the others. Asked for an own-node file alone, the
 * main phase has no file; it must be skipped, not started: `node --test` with no file runs every
 * test file it finds (seen: --only an own-real-node file started the whole suite). The fixtures
 * need real-node, so this file does too: the runner that runs it has ensured it (or skipped this
 * file where the machine cannot have it).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { it } from "node:test";
import { repoRoot } from "../../harness/prerequisites/needs.ts";

function runner(...fixtures: string[]): { status: number | null; out: string } {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const files = fixtures.map((f) => join("test", "unit", "harness", "fixtures", f));
  const r = spawnSync(process.execPath, [join(repoRoot, "scripts", "test.ts"), "--only", ...files], {
    cwd: repoRoot,
    encoding: "utf8",
    env,
  });
  return { status: r.status, out: `${r.stdout}\n${r.stderr}` };
}

it("--only an own-real-node file runs that file alone", () => {
  const { status, out } = runner("own-node-only.ts");
  assert.equal(status, 0, out);
  assert.doesNotMatch(out, /# running 0 test files/, "an empty main phase is not announced as run");
  assert.match(out, /# running 1 test file\(s\) that start real nodes of their own/);
  assert.match(out, /# summary: 1 passed, 0 failed, 0 cancelled, 0 skipped, 0 todo \(1 tests\)/);
});

it("runs a live-traffic file in a lane beside the pool, its report after the pool's, one verdict for both", () => {
  const { status, out } = runner("passes.ts", "traffic-lane.ts");
  assert.equal(status, 0, out);
  assert.match(
    out,
    /# running 2 test files \(1 of them with live traffic, one at a time beside the others\)/,
  );
  const pool = out.indexOf("✔ passes");
  const laneHeader = out.indexOf("# the live-traffic files, which ran beside the files above:");
  const lane = out.indexOf("✔ runs in the live-traffic lane");
  assert.ok(pool >= 0 && laneHeader > pool && lane > laneHeader, out);
  assert.match(out, /# summary: 2 passed, 0 failed, 0 cancelled, 1 skipped, 1 todo \(4 tests\)/);
});
