/**
 * Stage 6, report: the status write (status-writes.ts) and its Event. Only the operator's own
 * status fields are compared (operatorOwned), so a reconcile with nothing new writes nothing;
 * an Event is recorded for a problem and for its end (transitionEvent) and for each step of a
 * canary (canaryEvent), after the status that says it. A change within one step waits a moment
 * for the next step (countsSettleMs), remembered in ModelMemory.
 */
import type { MLModelStatus } from "../../api/mlmodel.ts";
import type { EventRecorder, EventType } from "../../runtime/index.ts";
import { canaryEvent } from "../canary/status.ts";
import { memoOnFrozen } from "../memo.ts";
import { canonicalJson } from "../names.ts";
import { justRolledBack } from "../rollback.ts";
import { operatorOwned, transitionEvent } from "../status.ts";
import type { WriteContext } from "./context.ts";
import type { ModelMemory } from "./memory.ts";
import type { Observation } from "./observation.ts";
import { applyModelStatus } from "./status-writes.ts";
import { type Waits, type WakeReason, wakeAfter } from "./wake-up.ts";

/**
 * A status change within one step (phase and reason unchanged: replicas, ready and updated
 * replicas, the download Job's state and attempts, the claim bound, and the messages and
 * conditions that say them) is written once it is this old, or with the next step, whichever
 * comes first: the reconcile comes back for it and writes whatever the status then is. A
 * rollout's counts move several times within a second or two (pod created, ready, rollout
 * reported complete; a claim bound, a download pod started, then done): written each time,
 * they would be 3 to 7 status writes per downloaded model where its steps take 3. A change of
 * phase, reason, generation, revision or canary is written at once (but a new generation's
 * first Deploying, see startsRollout); the rest lags by at most this (downloadCountsSettleMs
 * while downloading).
 */
export const countsSettleMs = 2000;

/**
 * A new generation's first Deploying status waits this long for the next step (kwok: the pod
 * Ready about half a second after the Deployment; a real image a few seconds), and is written
 * with it, or alone once it is this old: written at once, each model created or updated would
 * make two status writes (Deploying, then Ready) where the second alone says everything. The
 * reconcile that applied the new Deployment then ends with its child writes, one round trip
 * instead of two.
 */
export const rolloutSettleMs = countsSettleMs;

/**
 * A new generation's first Deploying is held back (ModelMemory.heldRollouts) while it waits for
 * the next step. While held, the status still says what the previous one said, for the
 * previous observedGeneration (true of that generation: its pods serve until the new ones are
 * ready), or nothing for a new model; never anything the new generation has not reached. Only
 * that one status is held (startsRollout): Ready, a failure, a rollback, a recorded failed
 * revision, a canary's step, and Downloading are written at once. The reconcile that ends a
 * hold says so (Waits.over), so that the requeue it asked for is withdrawn.
 *
 * Whether `after` is the first status of a new generation and says Deploying.
 */
export function startsRollout(before: MLModelStatus | undefined, after: MLModelStatus): boolean {
  return (
    after.phase === "Deploying" &&
    after.observedGeneration !== undefined &&
    before?.observedGeneration !== after.observedGeneration &&
    !after.canary &&
    !after.revision?.failed &&
    !after.conditions?.some((c) => c.type === "RolledBack" && c.status === "True")
  );
}

/** The ms left to hold `status` back, or undefined to write it now; starts the hold when new. */
function rolloutHold(
  memory: ModelMemory | undefined,
  key: string,
  before: MLModelStatus | undefined,
  status: MLModelStatus,
  now: number,
): number | undefined {
  if (!memory) return undefined;
  const held = memory.heldRollouts;
  if (!startsRollout(before, status)) {
    held.delete(key);
    return undefined;
  }
  let entry = held.get(key);
  if (!entry || entry.generation !== status.observedGeneration) {
    entry = { generation: status.observedGeneration, since: now };
    held.set(key, entry, now);
  }
  const wait = entry.since + rolloutSettleMs - now;
  if (wait > 0) return wait;
  held.delete(key);
  return undefined;
}

/**
 * The same while the model downloads (phase Downloading): the claim bound, the download pod
 * started (jobState Running, attempts 1) and the messages saying so are written once they are
 * this old, or with the next step. A download pod that waited for its volume is tried again by
 * the scheduler only after its backoff (1 to 10 s), and the Job completes a moment after its
 * pod: with 2 s, the claim's binding is a status write of its own for a share of the models.
 * The download's own progress (bytes, percent) is the downloader's to write, at its own pace,
 * and is not held.
 */
export const downloadCountsSettleMs = 15_000;

/** How long a change of counts alone in `status` is held back (countsSettleMs). */
export function settleMsFor(status: MLModelStatus): number {
  return status.phase === "Downloading" ? downloadCountsSettleMs : countsSettleMs;
}

/**
 * Writes the status when it changed, or holds it back (a new rollout's first Deploying, a
 * change of counts alone): the waits say when the held status is written, and which holds
 * this reconcile ended.
 */
export async function report(
  ctx: WriteContext & { recorder: EventRecorder },
  o: Observation,
  status: MLModelStatus,
  memory: ModelMemory | undefined,
): Promise<Waits> {
  const wasHeld = holdsOf(memory, o.key);
  const now = Date.parse(o.now);
  const wake = await writeOrHold(ctx, o, status, memory, now);
  const isHeld = holdsOf(memory, o.key);
  return {
    wakes: wake ? wakeAfter(wake.reason, now, wake.ms) : [],
    over: wasHeld.filter((r) => !isHeld.includes(r)),
  };
}

/** What of the model's status is held back now: a new rollout's first Deploying, a change of counts. */
export function holdsOf(memory: ModelMemory | undefined, key: string): WakeReason[] {
  return [
    ...(memory?.heldRollouts.has(key) ? (["rollout held"] as const) : []),
    ...(memory?.written.get(key)?.countsSince !== undefined ? (["counts held"] as const) : []),
  ];
}

async function writeOrHold(
  ctx: WriteContext & { recorder: EventRecorder },
  o: Observation,
  status: MLModelStatus,
  memory: ModelMemory | undefined,
  now: number,
): Promise<{ reason: WakeReason; ms: number } | undefined> {
  const { model } = o;
  const mine = memory?.written.get(o.key);
  if (canonicalJson(operatorOwned(status)) === ownedJson(model.status)) {
    if (mine) mine.countsSince = undefined;
    memory?.heldRollouts.delete(o.key);
    return undefined;
  }
  const hold = rolloutHold(memory, o.key, model.status, status, now);
  if (hold !== undefined) return { reason: "rollout held", ms: hold };
  // Only within a minute of a write of ours (an entry): a change of counts long after one
  // (an autoscaler's, a pod restarted) is written at once.
  if (mine && countsOnly(model.status, status)) {
    mine.countsSince ??= now;
    const wait = mine.countsSince + settleMsFor(status) - now;
    if (wait > 0) return { reason: "counts held", ms: wait };
  }
  const applied = await applyModelStatus(ctx, model, status);
  memory?.written.set(
    o.key,
    {
      fromResourceVersion: o.cached.metadata.resourceVersion,
      resourceVersion: applied?.metadata?.resourceVersion,
      status,
    },
    now,
  );
  const event = statusEvent(model.status, status);
  if (event) ctx.recorder.event(model, event.type, event.reason, event.message);
  const step = canaryEvent(model.status?.canary, status.canary);
  if (step) ctx.recorder.event(model, step.type, step.reason, step.message);
  return undefined;
}

/**
 * The operator's part of a status as canonical JSON, worked out once for a cached (frozen)
 * status: every reconcile compares its status with the cached one, and a model is reconciled
 * several times per version of it.
 */
const frozenOwnedJson = memoOnFrozen((status: MLModelStatus) => canonicalJson(operatorOwned(status)));

function ownedJson(status: MLModelStatus | undefined): string {
  return status ? frozenOwnedJson(status) : canonicalJson(operatorOwned(status));
}

/** Whether `after` differs from `before` in counts and their messages alone (see countsSettleMs). */
export function countsOnly(before: MLModelStatus | undefined, after: MLModelStatus): boolean {
  if (!before) return false;
  return canonicalJson(withoutCounts(before)) === canonicalJson(withoutCounts(after));
}

/**
 * The status without what may move within one step (phase and reason unchanged): the counts,
 * the messages, the download Job's state and attempts, the node cache's copies under way
 * (status.cache.fill and its line), and the conditions of the sub-steps (StorageReady when the
 * claim binds, during Downloading; Ready and the rest follow the phase).
 */
function withoutCounts(status: MLModelStatus): unknown {
  const owned = operatorOwned(status) as MLModelStatus;
  const {
    replicas: _r,
    readyReplicas: _rr,
    updatedReplicas: _u,
    message: _m,
    conditions: _c,
    download,
    cache,
    ...rest
  } = owned;
  // The node cache's copies under way move like counts: at most one write per settle time.
  const { fill: _f, progress: _p, ...cached } = cache ?? {};
  return { ...rest, download: download?.job, ...(cache ? { cache: cached } : {}) };
}

/** The Event a status change is worth: a Warning the first time it says rolled back, else a transition's. */
export function statusEvent(
  before: MLModelStatus | undefined,
  after: MLModelStatus,
): { type: EventType; reason: string; message: string } | undefined {
  if (!justRolledBack(before, after)) return transitionEvent(before, after);
  const rolledBack = after.conditions?.find((c) => c.type === "RolledBack")?.message ?? "rolled back";
  return { type: "Warning", reason: "RolledBack", message: after.revision?.failed ? rolledBack : "" };
}
