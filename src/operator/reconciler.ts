/**
 * The MLModel controller: thin glue between the caches, the pure desired-state and status
 * functions, and the API server. Level-based: every reconcile recomputes everything from the
 * current state and writes only what differs.
 */
import type {
  V1ControllerRevision,
  V1Deployment,
  V1Job,
  V1PersistentVolumeClaim,
  V1Pod,
  V1PodDisruptionBudget,
  V1Service,
  V2HorizontalPodAutoscaler,
} from "@kubernetes/client-node";
import { clusterServingRuntimeKind, mlModelKind, servingRuntimeKind } from "../api/kinds.ts";
import type { MLModel, MLModelStatus } from "../api/mlmodel.ts";
import type { AnyServingRuntime } from "../api/servingruntime.ts";
import { downloaderStatusFields } from "../downloader/contract.ts";
import {
  builtinKinds,
  CONTROLLER_OWNER_INDEX,
  controllerOwnerRef,
  generationChangedPredicate,
  type KubeObject,
  type Manager,
  type ReconcileContext,
  type ReconcileResult,
  type Request,
  type ResourceKind,
} from "../runtime/index.ts";
import {
  desiredAutoscaler,
  desiredDeployment,
  desiredDisruptionBudget,
  desiredDownloadIdentity,
  desiredDownloadJob,
  desiredService,
  desiredStorage,
  servingPodTemplate,
} from "./desired.ts";
import { needsApply, withAppliedHash } from "./drift.ts";
import { canonicalJson, childNames, fieldManager, labels, shortHash } from "./names.ts";
import { type OperatorConfig, PlanError, planModel, type RecordedSource, type ServingPlan } from "./plan.ts";
import { contentToKeep, desiredPruneJob } from "./prune.ts";
import {
  defaultRevisionHistoryLimit,
  desiredRevision,
  revisionsToPrune,
  withRevisionNumbers,
} from "./revisions.ts";
import { activeRollback, failureToRecord, justRolledBack, withRollback } from "./rollback.ts";
import { resolveRuntime } from "./runtime-selection.ts";
import { computeStatus, type MissingDependency, type Observed, transitionEvent } from "./status.ts";
import { ensureUriSecrets, missingUriSecret } from "./uri-secret.ts";

export interface MLModelControllerOptions extends OperatorConfig {
  concurrency?: number;
  now?: () => Date;
  /**
   * The last status this controller wrote per model, and the resourceVersion it was computed
   * from. A reconcile that runs before the cache has seen that write (a child changed in
   * between) compares against it instead of the cache's older status, so it neither writes the
   * same status twice nor records the same transition Event twice.
   */
  writtenStatus?: Map<string, { fromResourceVersion: string | undefined; status: MLModelStatus }>;
}

/** Index of MLModels by what they reference: "Secret/ns/name", "ConfigMap/ns/name", "PersistentVolumeClaim/ns/name". */
export const referenceIndex = "mlmodel-references";

export function modelReferences(model: Readonly<MLModel>): string[] {
  const ns = model.metadata.namespace;
  const m = model.spec?.model;
  const refs: string[] = [];
  if (m?.credentialsSecretRef) refs.push(`Secret/${ns}/${m.credentialsSecretRef.name}`);
  if (m?.configMapRef) refs.push(`ConfigMap/${ns}/${m.configMapRef.name}`);
  if (m?.uri?.startsWith("pvc://")) refs.push(`PersistentVolumeClaim/${ns}/${m.uri.slice(6).split("/")[0]}`);
  return refs;
}

/**
 * Only whether a Secret exists and which keys it has matters to the operator: values are
 * dropped before they reach the cache, so the operator's memory holds no credentials.
 */
export function secretWithoutValues(obj: KubeObject): KubeObject {
  const data = (obj as { data?: Record<string, string> }).data ?? {};
  const { managedFields: _m, ...metadata } = obj.metadata;
  return {
    apiVersion: obj.apiVersion,
    kind: obj.kind,
    metadata,
    data: Object.fromEntries(Object.keys(data).map((k) => [k, ""])),
  };
}

/** Index of our pods by "namespace/model" (their model label). */
export const podsByModelIndex = "pods-by-model";

export function podModelKeys(pod: Readonly<KubeObject>): string[] {
  const model = pod.metadata.labels?.[labels.model];
  return model ? [`${pod.metadata.namespace}/${model}`] : [];
}

/**
 * MLModels reconciled in parallel. Each reconcile is a few round trips to the API server, so
 * the work is latency-bound: 8 keeps a 2-core control plane busy without flooding it
 * (bench/README.md has the measurements behind the number).
 */
export const defaultConcurrency = 8;

const jobSpecHash = "serving.mlmodel.dev/job-spec-hash";
const retryKey = "serving.mlmodel.dev/retry-key";

export function addMLModelController(mgr: Manager, options: MLModelControllerOptions): void {
  const models = mgr.cache<MLModel>(mlModelKind, { indexes: { [referenceIndex]: modelReferences } });
  mgr.cache(builtinKinds.Secret, { transform: secretWithoutValues });
  // Only pods we started: the operator never holds every pod of the cluster in memory. Indexed
  // by model, so a reconcile reads its own pods instead of scanning its namespace's.
  mgr.cache(builtinKinds.Pod, { labelSelector: labels.model, indexes: { [podsByModelIndex]: podModelKeys } });
  const byReference =
    (kind: string) =>
    (obj: Readonly<KubeObject>): Request[] =>
      models
        .byIndex(referenceIndex, `${kind}/${obj.metadata.namespace}/${obj.metadata.name}`)
        .map((m) => ({ namespace: m.metadata.namespace, name: m.metadata.name! }));

  const written: NonNullable<MLModelControllerOptions["writtenStatus"]> = new Map();
  mgr
    .controller("mlmodel")
    .for(mlModelKind, { predicates: [generationChangedPredicate()] })
    .owns(builtinKinds.Deployment)
    .owns(builtinKinds.Service)
    .owns(builtinKinds.Job)
    .owns(builtinKinds.PersistentVolumeClaim)
    .owns(builtinKinds.HorizontalPodAutoscaler)
    .owns(builtinKinds.PodDisruptionBudget)
    .owns(builtinKinds.ControllerRevision)
    .watches(builtinKinds.Pod, (pod) => {
      const model = pod.metadata.labels?.[labels.model];
      return model ? [{ namespace: pod.metadata.namespace, name: model }] : [];
    })
    .watches(builtinKinds.Secret, byReference("Secret"))
    .watches(builtinKinds.ConfigMap, byReference("ConfigMap"))
    .watches(builtinKinds.PersistentVolumeClaim, byReference("PersistentVolumeClaim"))
    .watches(servingRuntimeKind, (rt) =>
      models
        .list(rt.metadata.namespace)
        .map((m) => ({ namespace: m.metadata.namespace, name: m.metadata.name! })),
    )
    .watches(clusterServingRuntimeKind, () =>
      models.list().map((m) => ({ namespace: m.metadata.namespace, name: m.metadata.name! })),
    )
    .concurrency(options.concurrency ?? defaultConcurrency)
    .reconcile((ctx) =>
      reconcileMLModel(ctx, { ...options, writtenStatus: options.writtenStatus ?? written }),
    );
}

function childrenOf<T>(ctx: ReconcileContext, kind: ResourceKind, model: MLModel): T[] {
  return ctx.cache(kind).byIndex(CONTROLLER_OWNER_INDEX, model.metadata.uid!) as unknown as T[];
}

function missingDependencies(ctx: ReconcileContext, plan: ServingPlan): MissingDependency[] {
  const ns = plan.namespace;
  const missing: MissingDependency[] = [];
  const creds = plan.credentials;
  if (creds) {
    const secret = ctx.cache<KubeObject & { data?: Record<string, string> }>(builtinKinds.Secret).get({
      namespace: ns,
      name: creds.secretName,
    });
    if (!secret) {
      missing.push({
        reason: "SecretNotFound",
        message: `Secret ${creds.secretName} (spec.model.credentialsSecretRef.name) does not exist in namespace ${ns}`,
      });
    } else if (creds.googleCredentialsKey && !(creds.googleCredentialsKey in (secret.data ?? {}))) {
      missing.push({
        reason: "SecretNotFound",
        message: `Secret ${creds.secretName} has no key "${creds.googleCredentialsKey}" (spec.model.credentialsSecretRef.googleCredentialsKey); it has: ${Object.keys(secret.data ?? {}).join(", ") || "no keys"}`,
      });
    }
  }
  const config = plan.configFile;
  if (config) {
    const cm = ctx.cache<KubeObject & { data?: Record<string, string> }>(builtinKinds.ConfigMap).get({
      namespace: ns,
      name: config.configMapName,
    });
    if (!cm) {
      missing.push({
        reason: "ConfigMapNotFound",
        message: `ConfigMap ${config.configMapName} (spec.model.configMapRef.name) does not exist in namespace ${ns}`,
      });
    } else if (!(config.key in (cm.data ?? {}))) {
      missing.push({
        reason: "ConfigMapKeyNotFound",
        message: `ConfigMap ${config.configMapName} has no key "${config.key}" (spec.model.configMapRef.key); it has: ${Object.keys(cm.data ?? {}).join(", ") || "no keys"}`,
      });
    }
  }
  const uriSecret = missingUriSecret(ctx.cache(builtinKinds.Secret), plan);
  if (uriSecret) missing.push(uriSecret);
  if (plan.source.type === "pvc") {
    const claim = ctx
      .cache(builtinKinds.PersistentVolumeClaim)
      .get({ namespace: ns, name: plan.source.claimName });
    if (!claim) {
      missing.push({
        reason: "ClaimNotFound",
        message: `PersistentVolumeClaim ${plan.source.claimName} (from spec.model.uri) does not exist in namespace ${ns}`,
      });
    }
  }
  return missing;
}

async function applyIfChanged<T extends KubeObject>(
  ctx: ReconcileContext,
  kind: ResourceKind,
  desired: object,
  actual: object | undefined,
): Promise<boolean> {
  const obj = withAppliedHash(desired as T);
  if (!needsApply(obj, actual as T | undefined)) return false;
  ctx.log.info({ kind: kind.kind, name: obj.metadata.name }, actual ? "updating child" : "creating child");
  await ctx.client.apply(kind, obj, { fieldManager, force: true, signal: ctx.signal });
  return true;
}

function jobState(job: V1Job | undefined): "Complete" | "Failed" | "Active" | undefined {
  if (!job) return undefined;
  const done = job.status?.conditions?.find(
    (c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
  );
  return (done?.type as "Complete" | "Failed" | undefined) ?? "Active";
}

/**
 * The download Job of the plan. Job templates are immutable and a Job is a one-shot action,
 * so a Job is created once and never re-applied: a running Job whose template no longer
 * matches is replaced, and a failed one is retried when its inputs (the spec, the credentials
 * Secret) change, which is how fixing the cause recovers without manual steps.
 */
async function syncDownloadJob(
  ctx: ReconcileContext,
  model: MLModel,
  plan: ServingPlan,
  options: OperatorConfig,
  jobs: V1Job[],
): Promise<{ job?: V1Job; retryLater?: boolean }> {
  const desired = desiredDownloadJob(plan, controllerOwnerRef(model), options);
  if (!desired) {
    // Nothing is downloaded (pvc://, an image): a past download's progress would be a claim
    // about content no longer served.
    if (staleProgress(ctx, model)) await clearProgress(ctx, model, null);
    return {};
  }
  const name = desired.metadata!.name!;
  const actual = jobs.find((j) => j.metadata?.name === name);
  const secretVersion = plan.credentials
    ? (ctx.cache(builtinKinds.Secret).get({ namespace: plan.namespace, name: plan.credentials.secretName })
        ?.metadata.resourceVersion ?? "")
    : "";
  const inputs = shortHash({ generation: model.metadata.generation, secretVersion });
  const specHash = shortHash(desired.spec);
  const state = jobState(actual);
  const stale =
    (state === "Failed" && actual?.metadata?.annotations?.[retryKey] !== inputs) ||
    (state === "Active" && actual?.metadata?.annotations?.[jobSpecHash] !== specHash);
  if (actual && stale) {
    ctx.log.info({ job: name, state }, "replacing download Job");
    await ctx.client.delete(
      builtinKinds.Job,
      { namespace: plan.namespace, name },
      { propagationPolicy: "Background" },
    );
    return { retryLater: true };
  }
  if (actual) return { job: actual };
  await applyDownloadIdentity(ctx, model, plan);
  // The progress shown must be this Job's: a previous download's (Complete, 100%) goes first.
  if (staleProgress(ctx, model)) await clearProgress(ctx, model, "progress");
  desired.metadata!.annotations = { [jobSpecHash]: specHash, [retryKey]: inputs };
  const created = await ctx.client.apply(builtinKinds.Job, desired as KubeObject, {
    fieldManager,
    force: true,
    signal: ctx.signal,
  });
  return { job: created as V1Job };
}

/**
 * The download Job's ServiceAccount, Role and RoleBinding, applied each time a Job is created
 * (idempotent) instead of cached: the operator neither watches nor holds every Role,
 * RoleBinding and ServiceAccount of the cluster. Applied without force: a same-named object
 * that another manager wrote (a user's Role) is a conflict, reported, never taken over.
 */
async function applyDownloadIdentity(
  ctx: ReconcileContext,
  model: MLModel,
  plan: ServingPlan,
): Promise<void> {
  const identity = desiredDownloadIdentity(plan, controllerOwnerRef(model));
  if (!identity) return;
  const [account, role, binding] = identity;
  const apply = (kind: ResourceKind, obj: object) =>
    ctx.client.apply(kind, obj as KubeObject, { fieldManager, force: false, signal: ctx.signal });
  // The pod is refused while its ServiceAccount is missing, and the binding names the Role.
  await Promise.all([apply(builtinKinds.ServiceAccount, account), apply(builtinKinds.Role, role)]);
  await apply(builtinKinds.RoleBinding, binding);
}

/** Whether the model's status (as cached, with what the downloader wrote) holds progress. */
function staleProgress(ctx: ReconcileContext, model: MLModel): boolean {
  const cached = ctx.cache<MLModel>(mlModelKind).get({
    namespace: model.metadata.namespace,
    name: model.metadata.name!,
  });
  const download = cached?.status?.download as Record<string, unknown> | undefined;
  return downloaderStatusFields.some((f) => download?.[f] !== undefined);
}

/**
 * Removes the downloader's progress fields (a JSON merge patch: the operator cannot drop
 * fields another manager owns by applying). "progress": those fields only, the operator's
 * job/jobState/attempts stay; null: status.download as a whole (nothing is downloaded).
 */
async function clearProgress(ctx: ReconcileContext, model: MLModel, what: "progress" | null): Promise<void> {
  const download = what === null ? null : Object.fromEntries(downloaderStatusFields.map((f) => [f, null]));
  ctx.log.info({ what: what ?? "download" }, "clearing the previous download's progress from status");
  await ctx.client.patch(
    mlModelKind,
    { namespace: model.metadata.namespace!, name: model.metadata.name! },
    { status: { download } },
    "merge",
    { subresource: "status", fieldManager, signal: ctx.signal },
  );
}

/**
 * Status fields the operator owns and applies. The downloader owns status.download's progress
 * fields: they are left out, so comparing never sees the downloader's changes as the
 * operator's, and applying never takes their ownership.
 */
export function operatorOwned(status: MLModelStatus | undefined): unknown {
  if (!status) return {};
  const { download, ...rest } = status;
  const { job, jobState: js, attempts } = download ?? {};
  const mine = Object.fromEntries(
    Object.entries({ job, jobState: js, attempts }).filter(([, v]) => v !== undefined),
  );
  // Progress alone (before the operator wrote its fields, or after) is no operator status.
  return Object.keys(mine).length ? { ...rest, download: mine } : rest;
}

export async function reconcileMLModel(
  ctx: ReconcileContext,
  options: MLModelControllerOptions,
): Promise<ReconcileResult | undefined> {
  const cached = ctx.cache<MLModel>(mlModelKind).get(ctx.request) as MLModel | undefined;
  const key = `${ctx.request.namespace}/${ctx.request.name}`;
  // Gone: its children are garbage-collected through their owner references.
  if (!cached) {
    options.writtenStatus?.delete(key);
    return undefined;
  }
  const mine = options.writtenStatus?.get(key);
  const model: MLModel =
    mine && mine.fromResourceVersion === cached.metadata.resourceVersion
      ? { ...cached, status: mine.status }
      : cached;
  const ns = model.metadata.namespace!;
  const now = (options.now ?? (() => new Date()))().toISOString();

  const fromSpec = planFor(ctx, model);
  let plan = fromSpec.plan;
  const planFailure = fromSpec.planFailure;
  const deleting = Boolean(model.metadata.deletionTimestamp);
  // The revision of the spec as written is recorded whatever is served (history shows it).
  const specRevision = plan ? servingPodTemplate(plan).revision : undefined;
  let revisions = childrenOf<V1ControllerRevision>(ctx, builtinKinds.ControllerRevision, model);
  if (specRevision && !deleting) revisions = await recordRevision(ctx, model, specRevision, revisions);
  const rollback = activeRollback(model, specRevision, revisions);
  if (rollback) plan = planFor(ctx, { ...model, spec: rollback.spec }, rollback.recorded).plan ?? plan;
  if (!deleting) await ensureUriSecrets(ctx, model, [fromSpec.plan, plan], revisions);

  const owner = controllerOwnerRef(model);
  const missing = plan ? missingDependencies(ctx, plan) : [];
  const jobs = childrenOf<V1Job>(ctx, builtinKinds.Job, model);
  const claims = childrenOf<V1PersistentVolumeClaim>(ctx, builtinKinds.PersistentVolumeClaim, model);
  let deployment = childrenOf<V1Deployment>(ctx, builtinKinds.Deployment, model).find(
    (d) => d.metadata?.name === childNames.deployment(model.metadata.name!),
  );
  let service = childrenOf<V1Service>(ctx, builtinKinds.Service, model)[0];
  const autoscalers = childrenOf<V2HorizontalPodAutoscaler>(ctx, builtinKinds.HorizontalPodAutoscaler, model);
  const budgets = childrenOf<V1PodDisruptionBudget>(ctx, builtinKinds.PodDisruptionBudget, model);
  let job: V1Job | undefined;
  let revision: string | undefined;
  let requeue: ReconcileResult | undefined;

  if (plan && missing.length === 0 && !deleting) {
    const storage = desiredStorage(plan, owner);
    if (storage)
      await applyIfChanged(
        ctx,
        builtinKinds.PersistentVolumeClaim,
        storage,
        claims.find((c) => c.metadata?.name === storage.metadata?.name),
      );
    const synced = await syncDownloadJob(ctx, model, plan, options, jobs);
    job = synced.job;
    if (synced.retryLater) requeue = { requeueAfterMs: 1000 };
    revision = servingPodTemplate(plan).revision;
    const downloaded = plan.source.type !== "download" || jobState(job) === "Complete";
    // The Deployment only moves to new content once it is fully downloaded: until then the
    // current pods keep serving the previous version.
    if (downloaded) {
      // Independent children: applied at once, so a reconcile costs one round trip, not four.
      const autoscaler = autoscalers.find((a) => a.metadata?.name === childNames.autoscaler(plan.name));
      const wantDeployment = desiredDeployment(plan, owner, { deployment, autoscaler });
      const wantService = desiredService(plan, owner);
      const [deploymentApplied, serviceApplied] = await Promise.all([
        applyIfChanged(ctx, builtinKinds.Deployment, wantDeployment, deployment),
        applyIfChanged(ctx, builtinKinds.Service, wantService, service),
        syncOptionalChild(
          ctx,
          builtinKinds.HorizontalPodAutoscaler,
          desiredAutoscaler(plan, owner),
          autoscalers,
        ),
        syncOptionalChild(
          ctx,
          builtinKinds.PodDisruptionBudget,
          desiredDisruptionBudget(plan, owner),
          budgets,
        ),
      ]);
      if (deploymentApplied) deployment ??= wantDeployment;
      if (serviceApplied) service ??= wantService;
    }
  }

  const modelPods = ctx
    .cache<KubeObject>(builtinKinds.Pod)
    .byIndex(podsByModelIndex, `${ns}/${model.metadata.name}`) as unknown as V1Pod[];
  const jobName = job?.metadata?.name;
  const observed: Observed = {
    model,
    now,
    planFailure,
    plan,
    revision,
    missing,
    storage:
      plan?.source.type === "download"
        ? claims.find((c) => c.metadata?.name === (plan.source as { claimName: string }).claimName)
        : undefined,
    job,
    jobPods: modelPods.filter((p) => jobName && p.metadata?.labels?.["job-name"] === jobName),
    deployment,
    pods: modelPods.filter((p) => p.metadata?.labels?.[labels.component] === "server"),
    service,
  };
  let status = withRevisionNumbers(computeStatus(observed), revisions);
  const generation = model.metadata.generation ?? 0;
  if (rollback) {
    status = withRollback(status, model.status, rollback.failed, rollback.target, generation, now);
  } else {
    const failed = failureToRecord(model, status, specRevision, revisions, now);
    // Recorded first, served next: the next reconcile reads it back (writtenStatus) and rolls back.
    if (failed) {
      status = { ...status, revision: { ...status.revision, failed } };
      requeue = { requeueAfterMs: 100 };
    }
  }
  const historyLimit = plan?.spec.rollout.revisionHistoryLimit ?? defaultRevisionHistoryLimit;
  const keep = new Set([status.revision?.current, status.revision?.lastReady, specRevision]);
  const pruned = revisionsToPrune(revisions, historyLimit, keep);
  for (const old of pruned) await deleteChild(ctx, builtinKinds.ControllerRevision, old);
  const keptRevisions = revisions.filter((r) => !pruned.includes(r));

  // Stale children go only once the current revision serves: old download Jobs (their
  // content is no longer used) and our claim when the model moved to pvc:// or an image.
  // Storage is pruned then too, of every model version no kept revision uses.
  if (status.phase === "Ready" && plan) {
    const prune = desiredPruneJob(plan, owner, options, contentToKeep(plan, keptRevisions));
    const pruneName = prune?.metadata?.name;
    for (const old of jobs) {
      const name = old.metadata?.name;
      if (name !== jobName && name !== pruneName) await deleteChild(ctx, builtinKinds.Job, old);
    }
    if (prune && !jobs.some((j) => j.metadata?.name === pruneName)) {
      ctx.log.info({ job: pruneName }, "pruning old model versions from storage");
      await ctx.client.apply(builtinKinds.Job, prune as KubeObject, {
        fieldManager,
        force: true,
        signal: ctx.signal,
      });
    }
    if (plan.source.type !== "download")
      for (const c of claims) await deleteChild(ctx, builtinKinds.PersistentVolumeClaim, c);
  }

  if (canonicalJson(operatorOwned(status)) !== canonicalJson(operatorOwned(model.status))) {
    await ctx.client.applyStatus(
      mlModelKind,
      {
        apiVersion: model.apiVersion,
        kind: model.kind,
        metadata: { name: model.metadata.name, namespace: ns },
        status,
      },
      { fieldManager, force: true, signal: ctx.signal },
    );
    options.writtenStatus?.set(key, { fromResourceVersion: cached.metadata.resourceVersion, status });
    const event = justRolledBack(model.status, status)
      ? {
          type: "Warning" as const,
          reason: "RolledBack",
          message: status.revision?.failed ? rolledBackMessage(status) : "",
        }
      : transitionEvent(model.status, status);
    if (event) ctx.recorder.event(model, event.type, event.reason, event.message);
  }
  return requeue;
}

function rolledBackMessage(status: MLModelStatus): string {
  return status.conditions?.find((c) => c.type === "RolledBack")?.message ?? "rolled back";
}

/** The serving plan of a model (or of a revision's spec), or why there is none. */
function planFor(
  ctx: ReconcileContext,
  model: MLModel,
  recorded?: RecordedSource,
): { plan?: ServingPlan; planFailure?: Observed["planFailure"] } {
  const ns = model.metadata.namespace!;
  const resolution = resolveRuntime(
    model,
    ctx.cache<AnyServingRuntime>(servingRuntimeKind).list(ns) as AnyServingRuntime[],
    ctx.cache<AnyServingRuntime>(clusterServingRuntimeKind).list() as AnyServingRuntime[],
  );
  if (!resolution.ok) return { planFailure: resolution };
  try {
    return { plan: planModel(model, resolution.runtime, recorded) };
  } catch (err) {
    if (!(err instanceof PlanError)) throw err;
    return { planFailure: { reason: err.reason, message: err.message } };
  }
}

/** Records the served revision (or renumbers it as the newest); returns the revisions after. */
async function recordRevision(
  ctx: ReconcileContext,
  model: MLModel,
  hash: string,
  revisions: V1ControllerRevision[],
): Promise<V1ControllerRevision[]> {
  const want = desiredRevision(model, hash, controllerOwnerRef(model), revisions);
  if (!want) return revisions;
  ctx.log.info({ revision: want.revision, hash }, "recording revision");
  const applied = (await ctx.client.apply(builtinKinds.ControllerRevision, want as unknown as KubeObject, {
    fieldManager,
    force: true,
    signal: ctx.signal,
  })) as unknown as V1ControllerRevision;
  return [...revisions.filter((r) => r.metadata?.name !== applied.metadata?.name), applied];
}

/** A child that exists only for some specs (autoscaler, disruption budget): apply it or remove it. */
async function syncOptionalChild(
  ctx: ReconcileContext,
  kind: ResourceKind,
  want: { metadata?: { name?: string } } | undefined,
  existing: readonly { metadata?: { name?: string; namespace?: string } }[],
): Promise<void> {
  const name = want?.metadata?.name;
  if (want)
    await applyIfChanged(
      ctx,
      kind,
      want,
      existing.find((e) => e.metadata?.name === name),
    );
  for (const stale of existing) if (stale.metadata?.name !== name) await deleteChild(ctx, kind, stale);
}

async function deleteChild(
  ctx: ReconcileContext,
  kind: ResourceKind,
  obj: { metadata?: { name?: string; namespace?: string } },
) {
  ctx.log.info({ kind: kind.kind, name: obj.metadata?.name }, "deleting stale child");
  await ctx.client.delete(
    kind,
    { namespace: obj.metadata!.namespace!, name: obj.metadata!.name! },
    { propagationPolicy: "Background" },
  );
}
