/**
 * The runner's verdict on a test run, from the summary reporter's lines and node's exit status:
 * a run passes only when node exited 0, no test failed and none was cancelled. A cancelled test
 * did not run to its end (its `before` hook threw, its parent failed, or it timed out), so it
 * proves nothing and counts as a failure. Files skipped for a prerequisite this machine cannot
 * have are counted in the summary line and the verdict line, in capitals like a failure: a run
 * that passed with tests left out must say so where a reader looks. Each file that did not pass
 * is listed, then its failed tests with the first lines of their errors.
 */
import { relative } from "node:path";
import { requiredEnv } from "./prerequisites/engine.ts";
import type { Counts, Failure, SummaryLine } from "./summary-reporter.ts";

/** Carries the skipped files to test/harness/skipped.ts (JSON). */
export const skippedFilesEnv = "MLMODEL_TEST_SKIPPED_FILES";

export interface SkippedFile {
  file: string;
  reason: string;
}

export interface Verdict {
  ok: boolean;
  lines: string[];
}

function countsText(c: Counts): string {
  return `${c.passed} passed, ${c.failed} failed, ${c.cancelled} cancelled, ${c.skipped} skipped, ${c.todo} todo`;
}

function filesText(n: number): string {
  return `${n} FILE${n === 1 ? "" : "S"}`;
}

/** A failed test: its file and name, then its error's lines, indented. */
function failureText(failure: Failure, root: string): string[] {
  const head = `#   ✖ ${relative(root, failure.file)}: ${failure.name}`;
  return [head, ...failure.error.split("\n").map((l) => `#       ${l}`)];
}

export function parseSummaryLines(text: string): SummaryLine[] {
  return text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as SummaryLine);
}

/** What one `node --test` invocation reported: its summary lines and its exit status. */
export interface PhaseResult {
  lines: readonly SummaryLine[];
  exitStatus: number | null;
}

/**
 * Several `node --test` invocations of one run (the files that start real nodes of their own run
 * after the others) as one: totals summed, files that did not pass listed together, the first
 * non-zero exit kept. A phase without a totals line leaves the merge without one, so the verdict
 * fails as it does for a single run that reported no summary.
 */
export function mergePhases(phases: readonly PhaseResult[]): PhaseResult {
  const totals = phases.map((p) => p.lines.find((l) => l.file === undefined));
  const files = phases.flatMap((p) => p.lines.filter((l) => l.file !== undefined));
  const exitStatus = phases.map((p) => p.exitStatus).find((s) => s !== 0) ?? 0;
  if (totals.some((t) => t === undefined)) return { lines: files, exitStatus };
  const sum = (key: keyof Counts) => totals.reduce((n, t) => n + t!.counts[key], 0);
  const counts: Counts = {
    tests: sum("tests"),
    passed: sum("passed"),
    failed: sum("failed"),
    cancelled: sum("cancelled"),
    skipped: sum("skipped"),
    todo: sum("todo"),
  };
  const failures = totals.flatMap((t) => t!.failures ?? []);
  const total: SummaryLine = { counts, success: totals.every((t) => t!.success) };
  if (failures.length > 0) total.failures = failures;
  return { lines: [total, ...files], exitStatus };
}

export function verdict(opts: {
  lines: readonly SummaryLine[];
  exitStatus: number | null;
  skippedFiles: readonly SkippedFile[];
  /** Files that had to run but could not (a required prerequisite unavailable, their cluster did not start): failures. */
  notRunFiles?: readonly SkippedFile[];
  root: string;
}): Verdict {
  const total = opts.lines.find((l) => l.file === undefined);
  const out: string[] = [];
  if (!total) {
    out.push(`# summary: node --test ended (exit ${opts.exitStatus}) without reporting a summary`);
    return { ok: false, lines: out };
  }
  const c = total.counts;
  const skipped = opts.skippedFiles.length;
  const skippedNote = skipped > 0 ? `; ${filesText(skipped)} SKIPPED` : "";
  out.push(`# summary: ${countsText(c)} (${c.tests} tests)${skippedNote}`);
  for (const line of opts.lines) {
    if (line.file === undefined) continue;
    out.push(`#   not passed: ${relative(opts.root, line.file)}: ${countsText(line.counts)}`);
  }
  for (const failure of total.failures ?? []) out.push(...failureText(failure, opts.root));
  for (const s of opts.skippedFiles) out.push(`#   SKIPPED FILE: ${s.file}: ${s.reason}`);
  const notRun = opts.notRunFiles ?? [];
  for (const s of notRun) out.push(`#   NOT RUN: ${s.file}: ${s.reason}`);
  const problems: string[] = [];
  if (c.failed > 0) problems.push(`${c.failed} failed`);
  if (c.cancelled > 0) problems.push(`${c.cancelled} cancelled (a cancelled test is a failure)`);
  if (notRun.length > 0)
    problems.push(`${notRun.length} file(s) not run (a file that had to run and did not is a failure)`);
  if (problems.length === 0 && opts.exitStatus !== 0) problems.push(`node --test exited ${opts.exitStatus}`);
  if (problems.length > 0) {
    out.push(`# FAILED: ${problems.join(", ")}${skippedNote}`);
    return { ok: false, lines: out };
  }
  if (skipped > 0) {
    out.push(
      `# PASSED WITH ${filesText(skipped)} SKIPPED: their tests did not run on this machine (${requiredEnv}=NAME makes a missing prerequisite a failure)`,
    );
    return { ok: true, lines: out };
  }
  out.push("# PASSED");
  return { ok: true, lines: out };
}
