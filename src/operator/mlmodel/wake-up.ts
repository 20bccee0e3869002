/**
 * When the reconcile comes back, as a value. Most changes wake a model through a watch; a few
 * things only time brings: the end of a status held back, a pod that is not watched and may
 * be stuck, a canary's pause, the rollback after a failure recorded. Each stage returns what
 * it waits for (a Wake: why, and when), and the waits it asked for earlier that are over now;
 * wakeUp, the reconcile's last step, turns them into the one result the queue gets.
 */
import type { ReconcileResult } from "../../runtime/index.ts";

export type WakeReason =
  /** assess: a failed revision was just recorded; the rollback follows at once. */
  | "failure recorded"
  /** assess: a download pod's grace for its new claim's volume ends (status.ts, claimBinding). */
  | "claim grace ends"
  /** assess: a download Job with no pod ready is looked at again (download-pods.ts). */
  | "download pods"
  /** assess: an unsettled rollout's pods are looked at again (serving-pods.ts). */
  | "serving pods"
  /** assess: a canary's pause ends, or its new step is judged (canary.ts, canaryWakes). */
  | "canary"
  /** sync: a stale download Job was deleted; its replacement is created next. */
  | "download Job replaced"
  /** report: a new generation's first Deploying is held back (report.ts, startsRollout). */
  | "rollout held"
  /** report: a change of counts alone is held back (report.ts, countsSettleMs). */
  | "counts held";

/** Come back at `at` (ms since the epoch), for `reason`. */
export interface Wake {
  reason: WakeReason;
  at: number;
}

/**
 * What one stage waits for, and which of the waits it may have asked for in an earlier
 * reconcile are over: a requeue pending for one of those would read nothing new.
 */
export interface Waits {
  wakes: readonly Wake[];
  over: readonly WakeReason[];
}

export const noWaits: Waits = { wakes: [], over: [] };

/** A failure just recorded is served back (rolled back) this soon. */
export const failureRecordedWakeMs = 100;

/** A wake `ms` after `now` for `reason`, or none when `ms` is undefined. */
export function wakeAfter(reason: WakeReason, now: number, ms: number | undefined): Wake[] {
  return ms === undefined ? [] : [{ reason, at: now + ms }];
}

/** The soonest of `wakes`, or undefined when there is none. */
export function soonest(wakes: readonly Wake[]): Wake | undefined {
  let first: Wake | undefined;
  for (const wake of wakes) if (!first || wake.at < first.at) first = wake;
  return first;
}

/**
 * The reconcile's result from every stage's waits: a requeue for the soonest wake. When a
 * wait asked for earlier is over, the result replaces the key's pending requeue
 * (replacesRequeue): the queue cannot tell one reason from another, so it would otherwise run
 * that requeue for nothing; the result still asks for every wake left, each stage having
 * recomputed its own.
 */
export function wakeUp(stages: readonly Waits[], now: number): ReconcileResult | undefined {
  const next = soonest(stages.flatMap((s) => s.wakes));
  const replaces = stages.some((s) => s.over.length > 0) ? { replacesRequeue: true } : undefined;
  return next === undefined ? replaces : { requeueAfterMs: next.at - now, ...replaces };
}
