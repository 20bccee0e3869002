/**
 * The MLModel reconcile: six stages with one direction of flow, each in a file of its own,
 * and a last pure step that says when to come back.
 *
 *   observe  (observe.ts)  cache reads, with the status this controller last wrote (and a
 *                          download Job's pods while they explain it: download-pods.ts; the
 *                          serving pods of a model that uses a canary: serving-pods.ts)
 *   decide   (decide.ts)   pure: the plan, the spec's revision, a rollback, missing references
 *   sync     (sync.ts)     one syncer per concern (syncers/): revision, URI Secrets, storage,
 *                          download, serving; then the serving pods, read while the Deployment
 *                          as synced has not settled (serving-pods.ts), and the log of a
 *                          runtime that gave up loading the model, once per crash (crash-logs.ts)
 *   assess   (assess.ts)   pure: the status, with revision numbers and the rollback
 *   cleanup  (cleanup.ts)  revisions beyond the history; once Ready, old Jobs, claims, storage
 *   report   (report.ts)   the status write and its Event, only when the status changed
 *   wakeUp   (wake-up.ts)  pure: the requeue for what the stages wait for
 *
 * Level-based: every reconcile recomputes everything from the current state and writes only
 * what differs. Each stage gets the earlier stages' results and returns its own; none reads
 * a cache after observe. What must outlive one reconcile is in ModelMemory (memory.ts).
 */
import type { ReconcileResult } from "../../runtime/index.ts";
import { keyString } from "../../runtime/index.ts";
import { assess } from "./assess.ts";
import { cleanup, cleanupSteps } from "./cleanup.ts";
import type { MLModelContext } from "./context.ts";
import { withCrashWords } from "./crash-logs.ts";
import { decide } from "./decide.ts";
import type { ModelMemory } from "./memory.ts";
import { observe } from "./observe.ts";
import { holdsOf, report } from "./report.ts";
import { withServingPods } from "./serving-pods.ts";
import { type SyncOptions, syncChildren } from "./sync.ts";
import { type Waits, wakeUp } from "./wake-up.ts";

export interface ReconcileOptions extends SyncOptions {
  now?: () => Date;
  /** Kept across reconciles by the controller; without it nothing is remembered or held back. */
  memory?: ModelMemory;
}

export async function reconcileMLModel(
  ctx: MLModelContext,
  options: ReconcileOptions,
): Promise<ReconcileResult | undefined> {
  const { memory } = options;
  const now = options.now?.() ?? new Date();
  const observed = await observe(ctx, memory, now, options);
  if (!observed) return wakeUp([modelGone(memory, keyString(ctx.request))], now.getTime());
  const decision = decide(observed);
  const synced = await syncChildren(ctx, observed, decision, options);
  for (const why of synced.refetches ?? [])
    ctx.recorder.event(observed.model, "Warning", "CacheEntryGone", why);
  const withPods = await withServingPods(ctx, observed, synced.serving.deployments);
  const seen = await withCrashWords(ctx, withPods, synced.revision, memory);
  const assessed = assess(seen, decision, synced);
  await cleanup(ctx, cleanupSteps(seen, decision, synced, assessed.status, options));
  const reported = await report(ctx, seen, assessed.status, memory);
  return wakeUp([synced.waits, assessed.waits, reported], Date.parse(observed.now));
}

/**
 * A deleted model: its children are garbage-collected through their owner references, and
 * what was remembered of it is forgotten; a status it held back waits for nothing now.
 */
function modelGone(memory: ModelMemory | undefined, key: string): Waits {
  const over = holdsOf(memory, key);
  memory?.forget(key);
  return { wakes: [], over };
}
