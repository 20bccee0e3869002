/**
 * What the real-node files that send live traffic share: waiting for more answers (counted,
 * never timed) and the zero-failure assertion with the first failures in its message.
 */
import assert from "node:assert/strict";
import { waitFor } from "../../harness/cluster.ts";
import type { Traffic, TrafficReport } from "../../harness/traffic.ts";

/** Waits until `count` requests sent from now on have been answered (or have failed). */
export async function moreAnswers(
  traffic: Pick<Traffic<unknown>, "now" | "samples">,
  count: number,
  what: string,
  timeoutMs = 120_000,
): Promise<void> {
  const from = traffic.now();
  await waitFor(
    `${count} more answers (${what})`,
    async () => traffic.samples.filter((s) => s.at >= from).length >= count,
    { timeoutMs },
  );
}

/** No request failed and the client dropped none (a dropped tick would hide a stall). */
export function assertNoFailures(report: TrafficReport, what: string): void {
  assert.equal(
    report.failed,
    0,
    `${what}: ${report.failed} of ${report.sent} failed: ${JSON.stringify(report.failures.slice(0, 10))}`,
  );
  assert.equal(report.dropped, 0, `${what}: the client dropped ${report.dropped} ticks`);
}
