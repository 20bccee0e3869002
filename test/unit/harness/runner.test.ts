/**
 * scripts/test.ts's verdict, run for real in a subprocess on fixture test files: a cancelled test
 * fails the run, node's own summary lines stay visible, and files that need an unavailable
 * prerequisite are reported as skipped tests with the reason.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import { repoRoot } from "../../harness/prerequisites/needs.ts";
import { mergePhases, parseSummaryLines, skippedFilesEnv, verdict } from "../../harness/run-summary.ts";

const fixtures = join("test", "unit", "harness", "fixtures");

/** This process's env without the marker node --test sets in its children. */
function plainEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  delete env.NODE_TEST_CONTEXT;
  return env;
}

function runTests(...files: string[]) {
  const r = spawnSync(process.execPath, [join(repoRoot, "scripts", "test.ts"), "--only", ...files], {
    cwd: repoRoot,
    encoding: "utf8",
    // A leaking fixture is ended 2 s after its tests, not the suite's 120 s.
    env: plainEnv({ MLMODEL_TEST_LEAK_GRACE_MS: "2000" }),
  });
  return { status: r.status, out: `${r.stdout}\n${r.stderr}` };
}

describe("scripts/test.ts", () => {
  it("fails a run whose tests were cancelled (a before hook threw), and says so", () => {
    const r = runTests(join(fixtures, "before-hook-throws.ts"));
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /ℹ cancelled 2/, "node's own summary line stays visible");
    assert.match(r.out, /# summary: 0 passed, 0 failed, 2 cancelled, 0 skipped, 0 todo \(2 tests\)/);
    assert.match(r.out, /not passed: test\/unit\/harness\/fixtures\/before-hook-throws\.ts: .*2 cancelled/);
    assert.match(r.out, /# FAILED: 2 cancelled \(a cancelled test is a failure\)/);
  });

  it("passes a run with passed, skipped and todo tests", () => {
    const r = runTests(join(fixtures, "passes.ts"));
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /# summary: 1 passed, 0 failed, 0 cancelled, 1 skipped, 1 todo \(3 tests\)/);
    assert.match(r.out, /# PASSED/);
  });
});

describe("a file that leaks a timer after its tests", () => {
  it("is ended once its tests are done, its results counted, and named", () => {
    const r = runTests(join(fixtures, "leaks-a-timer.ts"));
    assert.equal(r.status, 0, r.out);
    assert.match(r.out, /# summary: 2 passed, 0 failed, 0 cancelled, 0 skipped, 0 todo \(2 tests\)/);
    assert.match(r.out, /leaks-a-timer\.ts: still running 2 s after its last test/);
  });

  it("still fails the run when a test of it failed", () => {
    const r = runTests(join(fixtures, "leaks-and-fails.ts"));
    assert.equal(r.status, 1, r.out);
    assert.match(r.out, /# summary: 0 passed, 1 failed, 0 cancelled, 0 skipped, 0 todo \(1 tests\)/);
    assert.match(r.out, /leaks-and-fails\.ts: still running/);
  });

  it("names the failed test, its file and its error in the final verdict", () => {
    const r = runTests(join(fixtures, "leaks-and-fails.ts"));
    const verdictPart = r.out.slice(r.out.lastIndexOf("# summary:"));
    assert.match(
      verdictPart,
      /\n# {3}✖ test\/unit\/harness\/fixtures\/leaks-and-fails\.ts: a suite > starts an interval and fails\n# {7}Error: this fixture fails on purpose\n# FAILED: 1 failed/,
    );
  });
});

describe("skipped files", () => {
  it("become skipped tests named by the file, with the reason, counted by node", () => {
    const skipped = [
      { file: "test/e2e/node/a.test.ts", reason: "needs real-node, unavailable on this machine: not root" },
      { file: "test/e2e/node/b.test.ts", reason: "needs real-node, unavailable on this machine: not root" },
    ];
    const r = spawnSync(
      process.execPath,
      ["--test", "--test-reporter=spec", join(repoRoot, "test", "harness", "skipped.ts")],
      { cwd: repoRoot, encoding: "utf8", env: plainEnv({ [skippedFilesEnv]: JSON.stringify(skipped) }) },
    );
    assert.equal(r.status, 0, r.stdout);
    assert.match(
      r.stdout,
      /test\/e2e\/node\/a\.test\.ts .*# needs real-node, unavailable on this machine: not root/,
    );
    assert.match(r.stdout, /ℹ skipped 2/);
  });
});

describe("verdict", () => {
  const total = (counts: Partial<Record<string, number>>, success = true) => ({
    counts: { tests: 0, passed: 0, failed: 0, cancelled: 0, skipped: 0, todo: 0, ...counts },
    success,
  });

  it("fails on a failed test, on a cancelled one, and on a non-zero exit without either", () => {
    const failing = verdict({
      lines: [total({ failed: 1 }, false)],
      exitStatus: 1,
      skippedFiles: [],
      root: "/",
    });
    assert.deepEqual([failing.ok, failing.lines.at(-1)], [false, "# FAILED: 1 failed"]);
    const cancelled = verdict({
      lines: [total({ cancelled: 3 }, false)],
      exitStatus: 0,
      skippedFiles: [],
      root: "/",
    });
    assert.equal(cancelled.ok, false, "cancelled fails even if node exited 0");
    const crashed = verdict({ lines: [total({ passed: 2 })], exitStatus: 1, skippedFiles: [], root: "/" });
    assert.deepEqual([crashed.ok, crashed.lines.at(-1)], [false, "# FAILED: node --test exited 1"]);
  });

  it("fails when node reported no summary at all", () => {
    const v = verdict({ lines: [], exitStatus: 0, skippedFiles: [], root: "/" });
    assert.equal(v.ok, false);
    assert.match(v.lines[0]!, /without reporting a summary/);
  });

  it("passes with skipped and todo tests, counting the skipped files in the summary and the verdict", () => {
    const v = verdict({
      lines: parseSummaryLines(`${JSON.stringify(total({ tests: 4, passed: 2, skipped: 1, todo: 1 }))}\n`),
      exitStatus: 0,
      skippedFiles: [{ file: "test/e2e/x.test.ts", reason: "needs real-node, unavailable: not root" }],
      root: "/",
    });
    assert.equal(v.ok, true);
    assert.deepEqual(v.lines, [
      "# summary: 2 passed, 0 failed, 0 cancelled, 1 skipped, 1 todo (4 tests); 1 FILE SKIPPED",
      "#   SKIPPED FILE: test/e2e/x.test.ts: needs real-node, unavailable: not root",
      "# PASSED WITH 1 FILE SKIPPED: their tests did not run on this machine (MLMODEL_TEST_REQUIRE=NAME makes a missing prerequisite a failure)",
    ]);
  });

  it("says a plain PASSED only when no file was skipped", () => {
    const v = verdict({
      lines: [total({ tests: 2, passed: 2 })],
      exitStatus: 0,
      skippedFiles: [],
      root: "/",
    });
    assert.deepEqual(v.lines, [
      "# summary: 2 passed, 0 failed, 0 cancelled, 0 skipped, 0 todo (2 tests)",
      "# PASSED",
    ]);
  });

  it("names the skipped files in a failed run's verdict line too", () => {
    const skipped = ["a", "b"].map((n) => ({ file: `test/e2e/${n}.test.ts`, reason: "needs images" }));
    const v = verdict({
      lines: [total({ tests: 3, failed: 1 }, false)],
      exitStatus: 1,
      skippedFiles: skipped,
      root: "/",
    });
    assert.equal(v.ok, false);
    assert.equal(
      v.lines[0],
      "# summary: 0 passed, 1 failed, 0 cancelled, 0 skipped, 0 todo (3 tests); 2 FILES SKIPPED",
    );
    assert.equal(v.lines.at(-1), "# FAILED: 1 failed; 2 FILES SKIPPED");
  });

  it("fails with the files that had to run and could not, listed", () => {
    const v = verdict({
      lines: [total({ tests: 2, passed: 2 })],
      exitStatus: 0,
      skippedFiles: [],
      notRunFiles: [
        { file: "test/e2e/realnode/serve.test.ts", reason: "the run's real-node cluster did not start" },
      ],
      root: "/",
    });
    assert.equal(v.ok, false);
    assert.deepEqual(v.lines.slice(1), [
      "#   NOT RUN: test/e2e/realnode/serve.test.ts: the run's real-node cluster did not start",
      "# FAILED: 1 file(s) not run (a file that had to run and did not is a failure)",
    ]);
  });
});

describe("mergePhases", () => {
  const total = (counts: Partial<Record<string, number>>, success = true) => ({
    counts: { tests: 0, passed: 0, failed: 0, cancelled: 0, skipped: 0, todo: 0, ...counts },
    success,
  });

  it("sums the totals, lists every file that did not pass and keeps the first non-zero exit", () => {
    const bad = { file: "/r/test/e2e/x.test.ts", ...total({ tests: 1, failed: 1 }, false) };
    const merged = mergePhases([
      { lines: [total({ tests: 10, passed: 9, skipped: 1 })], exitStatus: 0 },
      { lines: [total({ tests: 3, passed: 2, failed: 1 }, false), bad], exitStatus: 1 },
    ]);
    assert.equal(merged.exitStatus, 1);
    assert.deepEqual(merged.lines, [total({ tests: 13, passed: 11, failed: 1, skipped: 1 }, false), bad]);
    assert.deepEqual(mergePhases([{ lines: [total({ tests: 1, passed: 1 })], exitStatus: 0 }]).lines, [
      total({ tests: 1, passed: 1 }),
    ]);
  });

  it("keeps every phase's failed tests on the totals, and the verdict lists them after the files", () => {
    const failure = (file: string, name: string) => ({ file, name, error: `Error: ${name} broke` });
    const merged = mergePhases([
      {
        lines: [{ ...total({ tests: 2, failed: 1 }, false), failures: [failure("/r/a.test.ts", "one")] }],
        exitStatus: 1,
      },
      { lines: [total({ tests: 1, passed: 1 })], exitStatus: 0 },
      {
        lines: [{ ...total({ tests: 1, failed: 1 }, false), failures: [failure("/r/b.test.ts", "s > two")] }],
        exitStatus: 1,
      },
    ]);
    assert.deepEqual(
      merged.lines[0]?.failures?.map((f) => f.name),
      ["one", "s > two"],
    );
    const v = verdict({ ...merged, skippedFiles: [], root: "/r" });
    assert.deepEqual(v.lines.slice(1), [
      "#   ✖ a.test.ts: one",
      "#       Error: one broke",
      "#   ✖ b.test.ts: s > two",
      "#       Error: s > two broke",
      "# FAILED: 2 failed",
    ]);
  });

  it("has no totals when one phase reported none, so the verdict fails", () => {
    const merged = mergePhases([
      { lines: [total({ tests: 1, passed: 1 })], exitStatus: 0 },
      { lines: [], exitStatus: 1 },
    ]);
    const v = verdict({ ...merged, skippedFiles: [], root: "/" });
    assert.equal(v.ok, false);
    assert.match(v.lines[0]!, /without reporting a summary/);
  });
});
