/**
 * What the real-node files that send live traffic share: the node to themselves while they run,
 * waiting for more answers (counted, never timed) and the zero-failure assertion with the first
 * failures in its message.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { readState } from "../../../src/cluster/index.ts";
import { type Burners, burnCores, burnCoresEnv, burnersRequested } from "../../harness/burner.ts";
import { waitFor } from "../../harness/cluster.ts";
import { holdLock } from "../../harness/exclusive.ts";
import {
  type Pauser,
  pauseKubeProxyEnv,
  pauseOnSchedule,
  pauseScheduleRequested,
} from "../../harness/kube-proxy-pause.ts";
import type { RealNodeCluster } from "../../harness/realnode.ts";
import type { Traffic, TrafficReport } from "../../harness/traffic.ts";

/**
 * A live-traffic file's suite timeout: its own run (up to about 10 minutes on a loaded machine)
 * plus the wait for another live-traffic file to finish (see holdNodeForTraffic).
 */
export const liveTrafficSuiteTimeoutMs = 40 * 60_000;

/**
 * The before hook of a live-traffic file: it waits for the node (holdNodeForTraffic) and then
 * deploys. Without its own timeout a hook gets the runner's per-test one (15 minutes), which a
 * wait behind another file's run can use up (seen: a suite failed after 900 s, all of it waiting).
 */
export const liveTrafficHook = { timeout: liveTrafficSuiteTimeoutMs };

/**
 * One file at a time sends live traffic to the run's real node. npm test runs three files at
 * once, and a file that starts MLServer pods and asserts zero failed requests cannot share the
 * 2-core machine with another such file: with canary-traffic.test.ts beside it, rollout.test.ts's
 * single v2 replica fell behind its 25 requests/s and 1,497 of 3,882 requests timed out (each
 * file alone: none). Take it before deploying the models, release it after removing them.
 */
export function holdNodeForTraffic(cluster: RealNodeCluster, holder: string): Promise<() => Promise<void>> {
  return holdLock(join(cluster.dir, "live-traffic.lock"), holder, {
    timeoutMs: liveTrafficSuiteTimeoutMs / 2,
    onWait: (owner) =>
      console.log(`# ${holder} waits for ${owner.holder} to finish its live traffic on the real node`),
  });
}

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

/**
 * The CPU burners a live-traffic file runs beside its traffic when MLMODEL_TEST_BURN_CORES asks
 * for them (e.g. 2 on a 2-core machine: the node's kubelet, kube-proxy and the servers then
 * compete for every core), each bounded by `maxMs`. Undefined when none are asked for.
 */
export function burnersForTraffic(what: string, maxMs: number): Burners | undefined {
  const count = burnersRequested();
  if (count === 0) return undefined;
  console.log(`# ${what}: ${count} CPU burner(s) beside the traffic (${burnCoresEnv})`);
  return burnCores(count, maxMs);
}

/**
 * The node's kube-proxy paused on the schedule MLMODEL_TEST_PAUSE_KUBE_PROXY asks for (e.g.
 * "8/40") while a live-traffic file's traffic runs, bounded by `maxMs`: the node's rules then lag
 * behind the EndpointSlices by up to the pause. Undefined when none is asked for.
 */
export async function kubeProxyPausesForTraffic(
  cluster: RealNodeCluster,
  what: string,
  maxMs: number,
): Promise<Pauser | undefined> {
  const schedule = pauseScheduleRequested();
  if (!schedule) return undefined;
  const kubeProxies = ((await readState(cluster.dir))?.processes ?? []).filter(
    (p) => p.component === "kube-proxy",
  );
  assert.ok(
    kubeProxies.length > 0,
    `${pauseKubeProxyEnv}: the cluster in ${cluster.dir} lists no kube-proxy`,
  );
  console.log(
    `# ${what}: kube-proxy paused ${schedule.pauseMs / 1000} s in every ${schedule.periodMs / 1000} s (${pauseKubeProxyEnv})`,
  );
  const pauser = pauseOnSchedule(kubeProxies, schedule, maxMs);
  return {
    pauses: pauser.pauses,
    async stop() {
      await pauser.stop();
      console.log(`# ${what}: kube-proxy was paused ${pauser.pauses()} time(s)`);
    },
  };
}
