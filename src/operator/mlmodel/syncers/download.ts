/**
 * Syncer: the download Job of the plan, its identity (ServiceAccount, Role, RoleBinding), and
 * the downloader's progress in status. Job templates are immutable and a Job is a one-shot
 * action, so a Job is created once and never re-applied: a running Job whose template no longer
 * matches is replaced, and a failed one is retried when its inputs (the spec, the credentials
 * Secret) change, which is how fixing the cause recovers without manual steps. A succeeded
 * NodeCache Job whose version no node holds any more (refetch.ts) is run again.
 */
import type { V1Job } from "@kubernetes/client-node";
import type { MLModel, MLModelStatus } from "../../../api/mlmodel.ts";
import { downloaderStatusFields } from "../../../downloader/contract.ts";
import {
  builtinKinds,
  controllerOwnerRef,
  type KubeObject,
  type ResourceKind,
} from "../../../runtime/index.ts";
import { desiredDownloadIdentity, desiredDownloadJob } from "../../desired.ts";
import { frozenHash } from "../../memo.ts";
import { annotations, fieldManager, shortHash } from "../../names.ts";
import type { OperatorConfig, ServingPlan } from "../../plan.ts";
import type { CacheHolders } from "../../refetch.ts";
import { jobState } from "../../status.ts";
import type { WriteContext } from "../context.ts";
import { clearDownloadProgress } from "../status-writes.ts";
import { withAnswer } from "./apply.ts";

export interface DownloadInput {
  model: MLModel;
  plan: ServingPlan;
  config: OperatorConfig;
  /** The model's Jobs, as cached. */
  jobs: readonly V1Job[];
  /** resourceVersion of the credentials Secret ("" without one): a new one retries a failed download. */
  secretVersion: string;
  /** status.download as cached, with what the downloader wrote. */
  cachedDownload: MLModelStatus["download"];
  /** Whether a node holds the version a NodeCache Job stored (refetch.ts); absent in mode Claim. */
  holders?: CacheHolders;
}

export interface DownloadResult {
  /** The plan's Job, as cached or as just created. */
  job?: V1Job;
  /** A stale Job was deleted: reconcile again soon to create its replacement. */
  retryLater?: boolean;
  /** Why a succeeded Job was deleted to be run again: no node holds its version any more. */
  refetch?: string;
}

export async function syncDownload(ctx: WriteContext, input: DownloadInput): Promise<DownloadResult> {
  const { model, plan } = input;
  const desired = desiredDownloadJob(plan, controllerOwnerRef(model), input.config);
  if (!desired) {
    // Nothing is downloaded (pvc://, an image): a past download's progress would be a claim
    // about content no longer served.
    if (holdsProgress(input.cachedDownload)) await clearDownloadProgress(ctx, model, null);
    return {};
  }
  const name = desired.metadata!.name!;
  const actual = input.jobs.find((j) => j.metadata?.name === name);
  const inputs = shortHash({ generation: model.metadata.generation, secretVersion: input.secretVersion });
  const specHash = frozenHash(desired.spec!);
  const state = jobState(actual);
  const stale =
    (state === "Failed" && actual?.metadata?.annotations?.[annotations.retryKey] !== inputs) ||
    (state === "Active" && actual?.metadata?.annotations?.[annotations.jobSpecHash] !== specHash);
  if (actual && stale) {
    ctx.log.info({ job: name, state }, "replacing download Job");
    await ctx.client.delete(
      builtinKinds.Job,
      { namespace: plan.namespace, name },
      { propagationPolicy: "Background" },
    );
    return { retryLater: true };
  }
  if (actual && state === "Complete" && input.holders?.verdict === "Gone") {
    // The Job is named by its content: the same name is created again by the next reconcile.
    ctx.log.info({ job: name, reason: input.holders.message }, "running download Job again");
    const deleted = await ctx.client.delete(
      builtinKinds.Job,
      { namespace: plan.namespace, name },
      { propagationPolicy: "Background" },
    );
    // A Job already gone (the cache has not seen its deletion yet) was told about once.
    return { retryLater: true, ...(deleted ? { refetch: input.holders.message } : {}) };
  }
  if (actual) return { job: actual };
  await applyDownloadIdentity(ctx, model, plan);
  // The progress shown must be this Job's: a previous download's (Complete, 100%) goes first.
  if (holdsProgress(input.cachedDownload)) await clearDownloadProgress(ctx, model, "progress");
  // desired is the plan's (frozen, desired.ts): the annotations go on a copy.
  const job = {
    ...desired,
    metadata: {
      ...desired.metadata,
      annotations: { [annotations.jobSpecHash]: specHash, [annotations.retryKey]: inputs },
    },
  };
  // Only the uid and resourceVersion of the answer are read: a create's version is its echo,
  // which then wakes nobody (wakes.ts, OwnWrites). The Job the status reports is `job` as
  // applied, without status, as the API server answers a create (it drops a new Job's status;
  // the Job controller writes it later, and those updates wake the model). An apply that found
  // the Job (created by a reconcile whose echo the cache has not shown yet) is reported the
  // same, as just started, until that echo, not remembered and so waking, brings it.
  const answer = await ctx.client.applyForVersion(builtinKinds.Job, job as KubeObject, {
    fieldManager,
    force: true,
    signal: ctx.signal,
  });
  return { job: withAnswer(job, answer) };
}

/**
 * The download Job's ServiceAccount, Role and RoleBinding, applied each time a Job is created
 * (idempotent) instead of cached: the operator neither watches nor holds every Role,
 * RoleBinding and ServiceAccount of the cluster (so their echoes wake nobody either). Applied
 * without force: a same-named object that another manager wrote (a user's Role) is a
 * conflict, reported, never taken over.
 */
async function applyDownloadIdentity(ctx: WriteContext, model: MLModel, plan: ServingPlan): Promise<void> {
  const identity = desiredDownloadIdentity(plan, controllerOwnerRef(model));
  if (!identity) return;
  const [account, role, binding] = identity;
  const apply = (kind: ResourceKind, obj: object) =>
    ctx.client.applyDiscardingAnswer(kind, obj as KubeObject, {
      fieldManager,
      force: false,
      signal: ctx.signal,
    });
  // The pod is refused while its ServiceAccount is missing, and the binding names the Role.
  await Promise.all([apply(builtinKinds.ServiceAccount, account), apply(builtinKinds.Role, role)]);
  await apply(builtinKinds.RoleBinding, binding);
}

/** Whether status.download holds fields the downloader wrote (progress). */
function holdsProgress(download: MLModelStatus["download"]): boolean {
  const fields = download as Record<string, unknown> | undefined;
  return downloaderStatusFields.some((f) => fields?.[f] !== undefined);
}
