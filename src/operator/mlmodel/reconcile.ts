/**
 * The MLModel reconcile: six stages with one direction of flow, each in a file of its own.
 *
 *   observe  (observe.ts)  cache reads, with the status this controller last wrote (and a
 *                          download Job's pods while they explain it: download-pods.ts; the
 *                          serving pods of a model that uses a canary: serving-pods.ts)
 *   decide   (decide.ts)   pure: the plan, the spec's revision, a rollback, missing references
 *   sync     (sync.ts)     one syncer per concern (syncers/): revision, URI Secrets, storage,
 *                          download, serving; then the serving pods, read while the Deployment
 *                          as synced has not settled (serving-pods.ts)
 *   assess   (assess.ts)   pure: the status, with revision numbers and the rollback
 *   cleanup  (cleanup.ts)  revisions beyond the history; once Ready, old Jobs, claims, storage
 *   report   (report.ts)   the status write and its Event, only when the status changed
 *
 * Level-based: every reconcile recomputes everything from the current state and writes only
 * what differs. Each stage gets the earlier stages' results and returns its own; none reads
 * a cache after observe, and only report writes the status.
 */
import type { ReconcileResult } from "../../runtime/index.ts";
import { keyString } from "../../runtime/index.ts";
import { assess, earliest } from "./assess.ts";
import { cleanup, cleanupSteps } from "./cleanup.ts";
import type { MLModelContext, WrittenStatuses } from "./context.ts";
import { decide } from "./decide.ts";
import { lookNoLongerNeeded } from "./download-pods.ts";
import { observe } from "./observe.ts";
import { type HeldRollouts, report } from "./report.ts";
import { modelDeployment, servingLookNoLongerNeeded, withServingPods } from "./serving-pods.ts";
import { type SyncOptions, syncChildren } from "./sync.ts";

export interface ReconcileOptions extends SyncOptions {
  now?: () => Date;
  /** Kept across reconciles by the controller (see WrittenStatuses). */
  writtenStatus?: WrittenStatuses;
  /** Kept across reconciles by the controller (see HeldRollouts); without it nothing is held. */
  heldRollouts?: HeldRollouts;
}

/** A deleted download Job is replaced by the next reconcile, this soon. */
const replaceJobAfterMs = 1000;

export async function reconcileMLModel(
  ctx: MLModelContext,
  options: ReconcileOptions,
): Promise<ReconcileResult | undefined> {
  const key = keyString(ctx.request);
  const held = options.heldRollouts;
  const wasHeld = held?.has(key) === true;
  const countsWereHeld = options.writtenStatus?.get(key)?.countsSince !== undefined;
  const observed = await observe(ctx, options.writtenStatus, options.now?.() ?? new Date());
  if (!observed) {
    // Gone: its children are garbage-collected through their owner references.
    options.writtenStatus?.delete(key);
    held?.delete(key);
    return wasHeld || countsWereHeld ? { replacesRequeue: true } : undefined;
  }
  const decision = decide(observed);
  const synced = await syncChildren(ctx, observed, decision, options);
  const seen = await withServingPods(ctx, observed, synced.serving.deployments);
  const { status, requeueAfterMs } = assess(seen, decision, synced);
  await cleanup(ctx, cleanupSteps(seen, decision, synced, status, options));
  const deferredMs = await report(ctx, seen, status, options.writtenStatus, held);
  const after = earliest(requeueAfterMs ?? (synced.retryLater ? replaceJobAfterMs : undefined), deferredMs);
  // A held rollout that ended here (Ready came first, or a status written at once) asked the
  // queue back for the end of its hold: a reconcile that would write nothing. So did a change
  // of counts held back (report.ts, countsSettleMs) that a status written here includes, or
  // that the status no longer has (issue 15: the serving pod's add held, then Ready written
  // before the hold ended; 0.7 reconciles per downloaded model at N = 20 that wrote nothing).
  // This result asks for every reason left to come back (each stage recomputes its own), so
  // it replaces that requeue, and any other not yet due, instead of adding to it.
  const holdEnded =
    (wasHeld && !held?.has(key)) ||
    (countsWereHeld && options.writtenStatus?.get(key)?.countsSince === undefined);
  // So did a download Job with no pod ready (download-pods.ts, lookAgainMs): once it has one,
  // or has ended, that look would read nothing new. So did the look at an unsettled
  // rollout's pods (serving-pods.ts, lookAgainMs), asked while the model was not Ready: once
  // its Deployment has settled.
  const lookEnded =
    lookNoLongerNeeded(synced.job, observed.now) ||
    servingLookNoLongerNeeded(observed.model, modelDeployment(observed.model, synced.serving.deployments));
  const replaces = holdEnded || lookEnded ? { replacesRequeue: true } : undefined;
  return after === undefined ? replaces : { requeueAfterMs: after, ...replaces };
}
