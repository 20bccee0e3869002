/**
 * A node:test reporter that scripts/test.ts adds beside the spec reporter (whose own summary
 * lines stay on screen): it writes, as JSON lines, the run's totals and each file that did not
 * pass, for the runner's final verdict; the totals carry the failed tests, each with its file,
 * its name and the first lines of its error. CI shows only the end of a run's output, and the
 * spec reporter's own list of failures comes before the serial real-node files run: the
 * verdict repeats what failed, briefly.
 */
import type { TestEvent } from "node:test/reporters";

export interface Counts {
  tests: number;
  passed: number;
  failed: number;
  cancelled: number;
  skipped: number;
  todo: number;
}

/** A failed test: its file, its name (within its suites) and the first lines of its error. */
export interface Failure {
  file: string;
  name: string;
  error: string;
}

/** One line of the reporter's output: a file that did not pass, or (no file) the whole run. */
export interface SummaryLine {
  file?: string;
  counts: Counts;
  success: boolean;
  /** On the totals line: the failed tests, at most `failureLimits.count` of them. */
  failures?: Failure[];
}

/** How much of one failure the verdict repeats. */
const failureLimits = { count: 10, errorLines: 4, errorChars: 400 };

/** The first lines of an error, as node:test reports it (its cause, where the test threw). */
function errorText(error: unknown): string {
  const cause = (error as { cause?: unknown } | undefined)?.cause ?? error;
  const text = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
  return text
    .split("\n")
    .map((l) => l.trimEnd())
    .filter((l) => l.trim())
    .slice(0, failureLimits.errorLines)
    .join("\n")
    .slice(0, failureLimits.errorChars);
}

/** Whether a failure is a suite's only because a test in it failed (that test is reported itself). */
function isSubtestsFailed(error: unknown): boolean {
  return (error as { failureType?: string } | undefined)?.failureType === "subtestsFailed";
}

export default async function* summaryReporter(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const failures: Failure[] = [];
  // The names of the suites a test is in, per file: files run at once interleave their events.
  const suites = new Map<string, string[]>();
  for await (const event of source) {
    if (event.type === "test:start" && event.data.file !== undefined) {
      const stack = suites.get(event.data.file) ?? [];
      suites.set(event.data.file, stack);
      stack[event.data.nesting] = event.data.name;
    }
    if (event.type === "test:fail") {
      const { file, nesting, name, details } = event.data;
      if (file === undefined || isSubtestsFailed(details.error)) continue;
      const path = [...(suites.get(file) ?? []).slice(0, nesting), name].join(" > ");
      if (failures.length < failureLimits.count)
        failures.push({ file, name: path, error: errorText(details.error) });
    }
    if (event.type !== "test:summary") continue;
    const { file, success } = event.data;
    // @types/node lacks `failed`, which node 24 reports.
    const counts = event.data.counts as typeof event.data.counts & { failed: number };
    if (file !== undefined && success) continue;
    const line: SummaryLine = {
      counts: {
        tests: counts.tests,
        passed: counts.passed,
        failed: counts.failed,
        cancelled: counts.cancelled,
        skipped: counts.skipped,
        todo: counts.todo,
      },
      success,
    };
    if (file !== undefined) line.file = file;
    else if (failures.length > 0) line.failures = failures;
    yield `${JSON.stringify(line)}\n`;
  }
}
