/**
 * Stage 5, cleanup: what is no longer needed goes. Revisions beyond the history limit go at
 * every reconcile (never the one served, the last ready one or the spec's). The rest only once
 * the model serves (phase Ready): old download Jobs (their content is no longer used; a
 * canary's and the stable one's are both in use), our claim when the model moved to pvc:// or
 * an image, and in model storage every content directory no kept revision uses (a prune Job,
 * when storage may hold any: mayHoldUnkept; an aborted canary's content goes too). The steps
 * are a pure function of the earlier stages' results; cleanup() carries them out in order.
 */
import type { V1ControllerRevision, V1Job } from "@kubernetes/client-node";
import type { MLModelStatus } from "../../api/mlmodel.ts";
import { builtinKinds, controllerOwnerRef, type KubeObject, type ResourceKind } from "../../runtime/index.ts";
import { contentToKeepWithCanary } from "../canary/prune.ts";
import { usesOwnClaim } from "../desired.ts";
import { fieldManager } from "../names.ts";
import type { OperatorConfig, ServingPlan } from "../plan.ts";
import { contentToKeep, desiredPruneJob } from "../prune.ts";
import { defaultRevisionHistoryLimit, revisionsToPrune } from "../revisions.ts";
import type { WriteContext } from "./context.ts";
import type { Decision } from "./decide.ts";
import type { Observation } from "./observation.ts";
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
  const keptContent = contentToKeepWithCanary(served, keptRevisions, status.canary);
  const prune = mayHoldUnkept(s.revisions, pruned, served, keptContent)
    ? desiredPruneJob(plan, controllerOwnerRef(o.model), config, keptContent)
    : undefined;
  const pruneName = prune?.metadata?.name;
  const inUse = new Set([...s.jobs.map((j) => j.metadata?.name), pruneName]);
  for (const old of o.children.jobs) {
    if (!inUse.has(old.metadata?.name)) steps.push({ verb: "delete", kind: builtinKinds.Job, object: old });
  }
  if (prune && !o.children.jobs.some((j) => j.metadata?.name === pruneName))
    steps.push({ verb: "prune", job: prune });
  // The claim goes once nothing served lives in it: the model moved to pvc://, an image, or
  // the node cache.
  if (!served.some(usesOwnClaim))
    for (const c of o.children.claims)
      steps.push({ verb: "delete", kind: builtinKinds.PersistentVolumeClaim, object: c });
  return steps;
}

/**
 * Whether model storage may hold content that `keep` leaves out, so that a prune Job has
 * something to do. Every download is of a recorded revision's content (a canary's too). While
 * no revision ever left the history (their numbers are exactly 1..n: one pruned, now or
 * before, or renumbered as the newest leaves a gap) and `keep` holds every revision's content
 * (no aborted canary left out), storage holds only kept content. So a model's first download,
 * and updates within its history limit, run no prune Job (and its pod). Unsure means yes: a
 * gap may have other causes, and an
 * unneeded prune only costs a Job.
 */
function mayHoldUnkept(
  revisions: readonly V1ControllerRevision[],
  pruned: readonly V1ControllerRevision[],
  served: readonly ServingPlan[],
  keep: readonly string[],
): boolean {
  if (pruned.length > 0) return true;
  const numbers = new Set(revisions.map((r) => r.revision));
  for (let n = 1; n <= revisions.length; n++) if (!numbers.has(n)) return true;
  return contentToKeep(served, revisions).some((content) => !keep.includes(content));
}

export async function cleanup(ctx: WriteContext, steps: readonly CleanupStep[]): Promise<void> {
  for (const step of steps) {
    if (step.verb === "delete") {
      await deleteChild(ctx, step.kind, step.object);
      continue;
    }
    ctx.log.info({ job: step.job.metadata?.name }, "pruning old model versions from storage");
    // Created once (only when not cached): its answer is read for the version alone, so that
    // the create's echo does not wake the model (wakes.ts, OwnWrites); its status updates do.
    await ctx.client.applyForVersion(builtinKinds.Job, step.job as KubeObject, {
      fieldManager,
      force: true,
      signal: ctx.signal,
    });
  }
}
