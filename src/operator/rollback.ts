/**
 * Automatic rollback (spec.rollout.autoRollback, on by default). Two steps, both level-based:
 * 1. the revision of the spec as written fails in a way that needs a person: its failure is
 *    recorded in status.revision.failed (the status write is the memory);
 * 2. while the spec's revision is that failed one, the operator serves the last ready
 *    revision's recorded spec instead (with the user's scaling), and says so: a RolledBack
 *    condition, phase reason RolledBack, a Warning event. The spec is never written; changing
 *    it gives a new revision, which clears the record and rolls forward.
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { Condition, MLModel, MLModelSpec, MLModelStatus } from "../api/mlmodel.ts";
import { redactText } from "../downloader/redact.ts";
import type { RecordedSource } from "./plan.ts";
import { recordedSource, revisionHash, revisionSpec, specWithScaling } from "./revisions.ts";

/** Failures of a new revision that the last ready one does not share. */
const rollbackReasons = new Set([
  "DownloadFailed",
  "ModelLoadFailed",
  "CrashLoopBackOff",
  "ImagePullBackOff",
  "CreateContainerConfigError",
  "ProgressDeadlineExceeded",
]);

export type FailedRevision = NonNullable<NonNullable<MLModelStatus["revision"]>["failed"]>;

function autoRollbackOn(model: MLModel): boolean {
  return model.spec.rollout?.autoRollback !== false;
}

function lastReadyRevision(
  lastReady: string | undefined,
  specRevision: string,
  revisions: readonly V1ControllerRevision[],
): V1ControllerRevision | undefined {
  if (!lastReady || lastReady === specRevision) return undefined;
  const found = revisions.find((r) => revisionHash(r) === lastReady);
  return found && revisionSpec(found) ? found : undefined;
}

/** Step 1: the failure to record, when the spec's revision just failed and a rollback is possible. */
export function failureToRecord(
  model: MLModel,
  status: MLModelStatus,
  specRevision: string | undefined,
  revisions: readonly V1ControllerRevision[],
  now: string,
): FailedRevision | undefined {
  if (!specRevision || !autoRollbackOn(model)) return undefined;
  if (status.phase !== "Failed" || !rollbackReasons.has(status.reason ?? "")) return undefined;
  if (!lastReadyRevision(status.revision?.lastReady, specRevision, revisions)) return undefined;
  const number = revisions.find((r) => revisionHash(r) === specRevision)?.revision;
  return {
    revision: specRevision,
    ...(number !== undefined ? { number } : {}),
    reason: status.reason!,
    message: status.message ?? "",
    at: now,
  };
}

/** Step 2: the spec to serve instead of the user's, while the spec's revision is the failed one. */
export function activeRollback(
  model: MLModel,
  specRevision: string | undefined,
  revisions: readonly V1ControllerRevision[],
):
  | { failed: FailedRevision; target: V1ControllerRevision; spec: MLModelSpec; recorded?: RecordedSource }
  | undefined {
  const failed = model.status?.revision?.failed;
  if (!specRevision || !failed || failed.revision !== specRevision || !autoRollbackOn(model))
    return undefined;
  const target = lastReadyRevision(model.status?.revision?.lastReady, specRevision, revisions);
  if (!target) return undefined;
  const recorded = recordedSource(target);
  return {
    failed,
    target,
    spec: specWithScaling(revisionSpec(target)!, model.spec),
    ...(recorded ? { recorded } : {}),
  };
}

function describeFailed(failed: FailedRevision): string {
  return `revision ${failed.number ?? "?"} (${failed.revision}) failed (${failed.reason}): ${failed.message}`;
}

/** Status while rolled back: the drift from the spec made plain. */
export function withRollback(
  status: MLModelStatus,
  previous: MLModelStatus | undefined,
  recordedFailure: FailedRevision,
  target: V1ControllerRevision,
  generation: number,
  now: string,
): MLModelStatus {
  // A record an older operator wrote may quote a URI with credentials in it.
  const shown = recordedFailure.message === undefined ? undefined : redactText(recordedFailure.message);
  const failed = shown === recordedFailure.message ? recordedFailure : { ...recordedFailure, message: shown };
  const served = `revision ${target.revision} (${revisionHash(target)})`;
  const message = `rolled back to ${served}: ${describeFailed(failed)}. The spec is unchanged; fix it and the operator rolls forward`;
  const before = previous?.conditions?.find((c) => c.type === "RolledBack" && c.status === "True");
  const rolledBack: Condition = {
    type: "RolledBack",
    status: "True",
    reason: failed.reason ?? "Failed",
    message,
    observedGeneration: generation,
    lastTransitionTime: before?.lastTransitionTime ?? now,
  };
  const serving = status.phase === "Ready";
  const conditions = (status.conditions ?? []).map((c) =>
    serving && c.type === "Ready" ? { ...c, reason: "RolledBack", message } : c,
  );
  return {
    ...status,
    ...(serving ? { reason: "RolledBack", message } : {}),
    conditions: [...conditions, rolledBack],
    revision: { ...status.revision, failed },
  };
}

/** True when this status is the first to say the model was rolled back (one Warning event). */
export function justRolledBack(previous: MLModelStatus | undefined, next: MLModelStatus): boolean {
  const was = previous?.conditions?.some((c) => c.type === "RolledBack" && c.status === "True");
  const is = next.conditions?.some((c) => c.type === "RolledBack" && c.status === "True");
  return Boolean(is && !was);
}
