/**
 * Stage 3, sync children: the syncers in syncers/, in the order the model needs them. The spec's
 * revision is recorded whatever happens next: beside the other children (one round trip less
 * per new model: nothing else reads the revision object, it is recorded history), or first
 * when there are URI Secrets of a URI with credentials in it (the spec's, the served one's and
 * a canary's), which it owns and which are created right after it. Then, unless something
 * referenced is missing or the model is being deleted: storage, the download Job (with a
 * canary, the canary's content too, beside the stable one's), and only once the content is
 * downloaded the serving children (until then the current pods keep serving the previous
 * version). Each syncer returns what it found or applied; nothing is read from a cache here.
 */
import type { V1ControllerRevision, V1Job } from "@kubernetes/client-node";
import { builtinKinds, controllerOwnerRef } from "../../runtime/index.ts";
import { servingPodTemplate } from "../desired.ts";
import type { OperatorConfig, ServingPlan } from "../plan.ts";
import { type CacheHolders, cacheHolders, jobCompletedAt } from "../refetch.ts";
import { jobState } from "../status.ts";
import { TtlMap } from "../ttl-map.ts";
import { referenceKey } from "./caches.ts";
import { desiredCanaryServing } from "./canary.ts";
import type { WriteContext } from "./context.ts";
import type { Decision } from "./decide.ts";
import type { ModelMemory } from "./memory.ts";
import type { Observation } from "./observation.ts";
import { type DownloadResult, syncDownload } from "./syncers/download.ts";
import { recordRevision } from "./syncers/revision.ts";
import { desiredServing, type ServingSet, servingChildren, syncServing } from "./syncers/serving.ts";
import { syncStorage } from "./syncers/storage.ts";
import { syncUriSecrets } from "./syncers/uri-secret.ts";
import { noWaits, type Waits, wakeAfter } from "./wake-up.ts";

export interface SyncOptions extends OperatorConfig {
  /** Kept across reconciles by the controller; without it nothing is remembered. */
  memory?: ModelMemory;
}

export interface Synced {
  /** The ControllerRevisions after the revision write. */
  revisions: readonly V1ControllerRevision[];
  /** The revision served (its pod template hash), when the children were synced. */
  revision?: string;
  /** The download Job the status reports (with a canary being downloaded, the canary's), as found or created. */
  job?: V1Job;
  /** The plan whose download `job` is. */
  downloadPlan?: ServingPlan;
  /** Every download Job in use (the stable's and a canary's): cleanup keeps them. */
  jobs: readonly V1Job[];
  /** A stale download Job was deleted: its replacement is created by a reconcile soon after. */
  waits: Waits;
  /** Why succeeded download Jobs were deleted to run again (no node holds their version): one Event each. */
  refetches?: readonly string[];
  /** The serving children as they now stand (as observed when they were not synced). */
  serving: ServingSet;
}

export async function syncChildren(
  ctx: WriteContext,
  o: Observation,
  d: Decision,
  config: SyncOptions,
): Promise<Synced> {
  const record = d.revisionToRecord;
  if (d.uriSecretPlans.length === 0) {
    // No URI Secret: the revision beside the rest. Both are waited for, and a failure of
    // either fails the reconcile (the first one's error), as in sequence.
    const [revisions, rest] = await settleBoth(
      record ? recordRevision(ctx, record, o.children.revisions) : o.children.revisions,
      syncRest(ctx, o, d, config),
    );
    return { revisions, ...rest };
  }
  const revisions = record ? await recordRevision(ctx, record, o.children.revisions) : o.children.revisions;
  await syncUriSecrets(ctx, {
    model: o.model,
    plans: d.uriSecretPlans,
    revisions,
    references: o.references,
    created: config.memory?.createdSecrets ?? new TtlMap(),
    now: Date.parse(o.now),
  });
  return { revisions, ...(await syncRest(ctx, o, d, config)) };
}

/** Both values once both settled; else the first failure (in argument order), once both settled. */
async function settleBoth<A, B>(a: A | Promise<A>, b: Promise<B>): Promise<[A, B]> {
  const [x, y] = await Promise.allSettled([a, b]);
  if (x.status === "rejected") throw x.reason;
  if (y.status === "rejected") throw y.reason;
  return [x.value, y.value];
}

/** Everything after the revision and the URI Secrets: storage, downloads, serving. */
async function syncRest(
  ctx: WriteContext,
  o: Observation,
  d: Decision,
  config: SyncOptions,
): Promise<Omit<Synced, "revisions">> {
  const live = servingChildren(o.children);
  const plan = d.plan;
  if (!plan || d.missing.length > 0 || d.deleting) return { serving: live, jobs: [], waits: noWaits };

  const owner = controllerOwnerRef(o.model);
  await syncStorage(ctx, plan, owner, o.children.claims);
  const download = await downloadOf(ctx, o, plan, config);
  // A canary's version downloads into its own content directory beside the stable one's.
  const canaryPlan = d.canary?.downloadsCanary ? d.canary.canaryServing : undefined;
  const separate = canaryPlan && jobNameOf(canaryPlan) !== jobNameOf(plan) ? canaryPlan : undefined;
  const canaryDownload = separate ? await downloadOf(ctx, o, separate, config) : undefined;
  const downloaded =
    isDownloaded(plan, download) && (!separate || isDownloaded(separate, canaryDownload ?? {}));
  const want = d.canary ? desiredCanaryServing(o, d.canary, owner) : desiredServing(plan, owner, live);
  const serving = downloaded ? await syncServing(ctx, want, live) : live;
  const reported = separate ? canaryDownload : download;
  const jobs = [download.job, canaryDownload?.job].filter((j): j is V1Job => j !== undefined);
  const refetches = [download.refetch, canaryDownload?.refetch].filter((r) => r !== undefined);
  return {
    ...(refetches.length > 0 ? { refetches } : {}),
    revision: servingPodTemplate(plan).revision,
    ...(reported?.job ? { job: reported.job } : {}),
    downloadPlan: separate ?? plan,
    jobs,
    serving,
    waits: {
      wakes: wakeAfter(
        "download Job replaced",
        Date.parse(o.now),
        download.retryLater || canaryDownload?.retryLater ? replaceJobAfterMs : undefined,
      ),
      over: [],
    },
  };
}

/** A deleted download Job is replaced by the next reconcile, this soon. */
const replaceJobAfterMs = 1000;

function jobNameOf(plan: ServingPlan): string | undefined {
  return plan.source.type === "download" ? plan.source.jobName : undefined;
}

function isDownloaded(plan: ServingPlan, download: DownloadResult): boolean {
  return plan.source.type !== "download" || jobState(download.job) === "Complete";
}

/** The download syncer for one plan, with the version of its credentials Secret. */
function downloadOf(
  ctx: WriteContext,
  o: Observation,
  plan: ServingPlan,
  config: OperatorConfig,
): Promise<DownloadResult> {
  const secret = plan.credentials
    ? o.references.get(
        referenceKey({
          kind: builtinKinds.Secret,
          namespace: plan.namespace,
          name: plan.credentials.secretName,
        }),
      )
    : undefined;
  return syncDownload(ctx, {
    model: o.model,
    plan,
    config,
    jobs: o.children.jobs,
    secretVersion: secret?.resourceVersion ?? "",
    cachedDownload: o.cached.status?.download,
    ...holdersOf(o, plan),
  });
}

/** Whether a node holds the version of a NodeCache plan whose Job succeeded (refetch.ts). */
function holdersOf(o: Observation, plan: ServingPlan): { holders?: CacheHolders } {
  const agents = o.nodeCache?.agents;
  if (plan.source.type !== "download" || !plan.source.nodeCache || !agents) return {};
  const { jobName } = plan.source;
  const job = o.children.jobs.find((j) => j.metadata?.name === jobName);
  return {
    holders: cacheHolders({
      key: plan.source.nodeCache.key,
      jobCompletedAt: jobCompletedAt(job),
      jobNode: agents.jobNodes?.get(jobName),
      states: agents.states,
      agentNodes: agents.agentNodes,
    }),
  };
}
