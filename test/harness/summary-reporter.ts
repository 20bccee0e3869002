/**
 * A node:test reporter that scripts/test.ts adds beside the spec reporter (whose own summary
 * lines stay on screen): it writes, as JSON lines, the run's totals and each file that did not
 * pass, for the runner's final verdict.
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

/** One line of the reporter's output: a file that did not pass, or (no file) the whole run. */
export interface SummaryLine {
  file?: string;
  counts: Counts;
  success: boolean;
}

export default async function* summaryReporter(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  for await (const event of source) {
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
    yield `${JSON.stringify(line)}\n`;
  }
}
