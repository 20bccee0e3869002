/**
 * Stage 5, cleanup: what is no longer needed goes. Revisions beyond the history limit go at
 * every reconcile (never the one served, the last ready one or the spec's). The rest only once
 * the model serves (phase
 * Ready): old download Jobs (their content is no longer used; a canary's and the stable one's
 * are both in use), our claim when the model moved to pvc:// or an image, and in model storage
 * every content directory no kept revision uses (a prune Job; an aborted canary's content
 * goes too). The steps are a pure function of the earlier stages' results; cleanup() carries
 * them out in order.
 */
import type { V1Job } from "@kubernetes/client-node";
import type { MLModelStatus } from "../../api/mlmodel.ts";
import { builtinKinds, controllerOwnerRef, type KubeObject, type ResourceKind } from "../../runtime/index.ts";
import { contentToKeepWithCanary } from "../canary/prune.ts";
import { fieldManager } from "../names.ts";
import type { OperatorConfig } from "../plan.ts";
import { desiredPruneJob } from "../prune.ts";
import { defaultRevisionHistoryLimit, revisionsToPrune } from "../revisions.ts";
import type { WriteContext } from "./context.ts";
import type { Decision } from "./decide.ts";
import type { Observation } from "./observe.ts";
import type { Synced } from "./sync.ts";
import { type Child, deleteChild } from "./syncers/apply.ts";

export type CleanupStep =
  | { verb: "delete"; kind: ResourceKind; object: Child }
  /** The Job that prunes model storage (created once; its name hashes what it keeps). */
  | { verb: "prune"; job: V1Job };

export function cleanupSteps(
  o: Observation,
  d: Decision,
  s: Synced,
  status: MLModelStatus,
  config: OperatorConfig,
): CleanupStep[] {
  const plan = d.plan;
  const steps: CleanupStep[] = [];
  const historyLimit = plan?.spec.rollout.revisionHistoryLimit ?? defaultRevisionHistoryLimit;
  const keep = new Set([status.revision?.current, status.revision?.lastReady, d.specRevision]);
  const pruned = revisionsToPrune(s.revisions, historyLimit, keep);
  for (const old of pruned)
    steps.push({ verb: "delete", kind: builtinKinds.ControllerRevision, object: old });
  if (status.phase !== "Ready" || !plan) return steps;

  const keptRevisions = s.revisions.filter((r) => !pruned.includes(r));
  const served = [plan, ...(d.canary?.canaryServing ? [d.canary.canaryServing] : [])];
  const prune = desiredPruneJob(
    plan,
    controllerOwnerRef(o.model),
    config,
    contentToKeepWithCanary(served, keptRevisions, status.canary),
  );
  const pruneName = prune?.metadata?.name;
  const inUse = new Set([...s.jobs.map((j) => j.metadata?.name), pruneName]);
  for (const old of o.children.jobs) {
    if (!inUse.has(old.metadata?.name)) steps.push({ verb: "delete", kind: builtinKinds.Job, object: old });
  }
  if (prune && !o.children.jobs.some((j) => j.metadata?.name === pruneName))
    steps.push({ verb: "prune", job: prune });
  if (plan.source.type !== "download")
    for (const c of o.children.claims)
      steps.push({ verb: "delete", kind: builtinKinds.PersistentVolumeClaim, object: c });
  return steps;
}

export async function cleanup(ctx: WriteContext, steps: readonly CleanupStep[]): Promise<void> {
  for (const step of steps) {
    if (step.verb === "delete") {
      await deleteChild(ctx, step.kind, step.object);
      continue;
    }
    ctx.log.info({ job: step.job.metadata?.name }, "pruning old model versions from storage");
    await ctx.client.apply(builtinKinds.Job, step.job as KubeObject, {
      fieldManager,
      force: true,
      signal: ctx.signal,
    });
  }
}
