// test-needs: own-real-node
/**
 * scripts/test.ts runs files that start real nodes of their own in a phase after the others.
 * Asked for such a file alone, the main phase has no file; it must be skipped, not started:
 * `node --test` with no file runs every test file it finds (seen: --only an own-real-node file
 * started the whole suite). The fixture needs own-real-node, so this file does too: the
 * runner that runs it has ensured it (or skipped this file where the machine cannot have it).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { it } from "node:test";
import { repoRoot } from "../../harness/prerequisites/needs.ts";

it("--only an own-real-node file runs that file alone", () => {
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const fixture = join("test", "unit", "harness", "fixtures", "own-node-only.ts");
  const r = spawnSync(process.execPath, [join(repoRoot, "scripts", "test.ts"), "--only", fixture], {
    cwd: repoRoot,
    encoding: "utf8",
    env,
  });
  const out = `${r.stdout}\n${r.stderr}`;
  assert.equal(r.status, 0, out);
  assert.doesNotMatch(out, /# running 0 test files/, "an empty main phase is not announced as run");
  assert.match(out, /# running 1 test file\(s\) that start real nodes of their own/);
  assert.match(out, /# summary: 1 passed, 0 failed, 0 cancelled, 0 skipped, 0 todo \(1 tests\)/);
});
