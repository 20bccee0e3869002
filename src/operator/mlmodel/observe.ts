/**
 * Stage 1, observe: everything one reconcile reads, gathered once into plain data: from the
 * shared caches, and from the API server only the model's download pods, while one of its
 * download Jobs needs explaining (download-pods.ts) or a succeeded NodeCache download's key
 * may be held by no node (with the node cache agents' pods then: observeAgents), and its
 * serving pods when it uses a canary (serving-pods.ts): none is cached. No stage after this one reads a cache, and
 * only one reads the API server: a model's serving pods, after sync, while its Deployment
 * has not settled (serving-pods.ts, withServingPods). So what the reconcile decides is a
 * function of this snapshot.
 */
import type { V1ControllerRevision, V1Deployment, V1Pod } from "@kubernetes/client-node";
import { clusterServingRuntimeKind, mlModelKind, servingRuntimeKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import type { AnyServingRuntime } from "../../api/servingruntime.ts";
import { type NodeCacheState, nodeCacheComponentLabels } from "../../nodecache/contract.ts";
import {
  builtinKinds,
  CONTROLLER_OWNER_INDEX,
  type KubeObject,
  keyString,
  type ResourceKind,
} from "../../runtime/index.ts";
import { httpRouteKind } from "../canary/desired.ts";
import { labels } from "../names.ts";
import { modelCacheKeys, nodeCacheKeysIndex, nodeCacheStateOf } from "../node-cache.ts";
import { defaultOperatorConfig, type OperatorConfig } from "../plan.ts";
import { agentRuns, jobCacheKey, jobNodeOf } from "../refetch.ts";
import { revisionHash, revisionSpec } from "../revisions.ts";
import { jobState } from "../status.ts";
import { referenceKey, specReferences, uriSecretsByModelIndex } from "./caches.ts";
import { observeCanary, usesCanary } from "./canary.ts";
import type { ReadContext } from "./context.ts";
import { readDownloadPods } from "./download-pods.ts";
import type { ModelMemory } from "./memory.ts";
import type {
  AgentsObservation,
  Children,
  NodeCacheObservation,
  Observation,
  Reference,
} from "./observation.ts";
import { listServingPods } from "./serving-pods.ts";

/** The model of the request and what it depends on, or undefined when the model is gone. */
export async function observe(
  ctx: ReadContext,
  memory: ModelMemory | undefined,
  now: Date,
  config: Partial<OperatorConfig> = {},
): Promise<Observation | undefined> {
  const cached = ctx.cache<MLModel>(mlModelKind).get(ctx.request) as MLModel | undefined;
  if (!cached) return undefined;
  const key = keyString(ctx.request);
  const mine = memory?.written.get(key);
  const model: MLModel = cacheBehind(mine, cached.metadata.resourceVersion)
    ? { ...cached, status: mine!.status }
    : cached;
  const ns = model.metadata.namespace!;
  const uid = model.metadata.uid!;
  const owned = <T>(kind: ResourceKind) =>
    ctx.cache(kind).byIndex(CONTROLLER_OWNER_INDEX, uid) as unknown as readonly T[];
  const children: Children = {
    revisions: owned(builtinKinds.ControllerRevision),
    jobs: owned(builtinKinds.Job),
    claims: owned(builtinKinds.PersistentVolumeClaim),
    deployments: owned(builtinKinds.Deployment),
    services: owned(builtinKinds.Service),
    autoscalers: owned(builtinKinds.HorizontalPodAutoscaler),
    budgets: owned(builtinKinds.PodDisruptionBudget),
    routes: ctx.served(httpRouteKind) ? owned(httpRouteKind) : [],
  };
  return {
    key,
    cached,
    model,
    now: now.toISOString(),
    runtimes: {
      namespaced: ctx.cache<AnyServingRuntime>(servingRuntimeKind).list(ns) as readonly AnyServingRuntime[],
      cluster: ctx.cache<AnyServingRuntime>(clusterServingRuntimeKind).list() as readonly AnyServingRuntime[],
    },
    references: referencedObjects(ctx, model, children.revisions),
    children,
    pods: usesCanary(model)
      ? await listServingPods(ctx.client, { namespace: ns, name: model.metadata.name! }, ctx.signal)
      : undefined,
    downloadPods: await readDownloadPods(
      ctx.client,
      { namespace: ns, name: model.metadata.name! },
      children.jobs,
      now.toISOString(),
      ctx.signal,
    ),
    canary: observeCanary(ctx, model),
    ...(config.nodeCacheUrl ? { nodeCache: await observeNodeCache(ctx, model, config, children) } : {}),
  };
}

/**
 * The agents' states that list one of the model's cache keys, from the ConfigMap cache's index
 * (caches.ts); only those in the node cache's namespace, where only the agents may write. And
 * what tells whether a succeeded download's version is still held (observeAgents).
 */
async function observeNodeCache(
  ctx: ReadContext,
  model: MLModel,
  config: Partial<OperatorConfig>,
  children: Children,
): Promise<NodeCacheObservation> {
  const base = {
    url: config.nodeCacheUrl!,
    image: config.downloaderImage ?? defaultOperatorConfig.downloaderImage,
  };
  if (config.nodeCacheStatesWatched === false) return base;
  const configMaps = ctx.cache(builtinKinds.ConfigMap);
  const found = new Set<Readonly<KubeObject>>();
  for (const key of modelCacheKeys(model))
    for (const cm of configMaps.byIndex(nodeCacheKeysIndex, key))
      if (!config.nodeCacheNamespace || cm.metadata.namespace === config.nodeCacheNamespace) found.add(cm);
  const states = [...found].map(nodeCacheStateOf).filter((s) => s !== undefined);
  const agents = await observeAgents(ctx, model, config.nodeCacheNamespace, children);
  return { ...base, states, ...(agents ? { agents } : {}) };
}

/**
 * Every agent's state in the node cache's namespace (cached), and, only while the key of a
 * succeeded NodeCache download Job may be gone (mayBeGone), the agents' pods (which nodes run
 * one) and the model's download pods (where each Job ran), read from the API server: neither
 * is cached, and a model whose version is listed and served reads neither. Undefined without
 * the node cache's namespace (a URL given by flag): the agents cannot be told apart then.
 */
async function observeAgents(
  ctx: ReadContext,
  model: MLModel,
  namespace: string | undefined,
  children: Children,
): Promise<AgentsObservation | undefined> {
  if (!namespace) return undefined;
  const states = ctx
    .cache(builtinKinds.ConfigMap)
    .list(namespace)
    .map(nodeCacheStateOf)
    .filter((s) => s !== undefined);
  const succeeded = children.jobs.filter(
    (j) => j.metadata?.labels?.[labels.component] === "download" && jobState(j) === "Complete",
  );
  const keys = succeeded.map(jobCacheKey).filter((k) => k !== undefined);
  if (!keys.some((key) => mayBeGone(key, states, children.deployments))) return { states };
  const [agentPods, downloadPods] = await Promise.all([
    ctx.client.list<KubeObject & V1Pod>(builtinKinds.Pod, {
      namespace,
      labelSelector: agentSelector,
      withoutManagedFields: true,
      signal: ctx.signal,
    }),
    ctx.client.list<KubeObject & V1Pod>(builtinKinds.Pod, {
      namespace: model.metadata.namespace!,
      labelSelector: `${labels.model}=${model.metadata.name},${labels.component}=download`,
      withoutManagedFields: true,
      signal: ctx.signal,
    }),
  ]);
  const agentNodes = new Set(agentPods.items.filter(agentRuns).map((p) => p.spec!.nodeName!));
  const jobNodes = new Map<string, string>();
  for (const job of succeeded) {
    const node = jobNodeOf(job, downloadPods.items);
    if (node) jobNodes.set(job.metadata!.name!, node);
  }
  return { states, agentNodes, jobNodes };
}

const agentSelector = Object.entries(nodeCacheComponentLabels)
  .map(([k, v]) => `${k}=${v}`)
  .join(",");

/**
 * Whether a succeeded download's key may be held by no node: no agent lists it, or the model's
 * pods are yet to be made or some of its Deployments lacks available pods (which may be
 * waiting for it, while a state that lists it may be a gone node's). A model whose key is
 * listed and whose pods all serve reads nothing more.
 */
export function mayBeGone(
  key: string,
  states: readonly NodeCacheState[],
  deployments: readonly V1Deployment[],
): boolean {
  if (!states.some((s) => s.entries.some((e) => e.key === key))) return true;
  if (deployments.length === 0) return true;
  return deployments.some((d) => (d.status?.availableReplicas ?? 0) < (d.spec?.replicas ?? 1));
}

/**
 * Whether the cached model is older than the status this controller last wrote: it is the
 * version that write was computed from, or (resourceVersions being etcd revisions, integers
 * that grow with every write) any version before the one the write produced. A cache that lags
 * by two writes would otherwise hand back the status before the last one.
 */
function cacheBehind(
  mine: { fromResourceVersion: string | undefined; resourceVersion?: string | undefined } | undefined,
  cachedResourceVersion: string | undefined,
): boolean {
  if (!mine) return false;
  if (mine.fromResourceVersion === cachedResourceVersion) return true;
  const written = Number(mine.resourceVersion);
  const cached = Number(cachedResourceVersion);
  return Number.isSafeInteger(written) && Number.isSafeInteger(cached) && cached < written;
}

function referencedObjects(
  ctx: ReadContext,
  model: MLModel,
  revisions: readonly V1ControllerRevision[],
): Map<string, Reference> {
  const ns = model.metadata.namespace!;
  const lastReady = revisions.find((r) => revisionHash(r) === model.status?.revision?.lastReady);
  const refs = [
    ...specReferences(ns, model.spec),
    ...(lastReady ? specReferences(ns, revisionSpec(lastReady)) : []),
  ];
  const found = new Map<string, Reference>();
  for (const ref of refs) {
    const obj = ctx.cache<KubeObject>(ref.kind).get(ref);
    if (obj) found.set(referenceKey(ref), referenceTo(obj));
  }
  const uriSecrets = ctx
    .cache(builtinKinds.Secret)
    .byIndex(uriSecretsByModelIndex, `${ns}/${model.metadata.name}`);
  for (const secret of uriSecrets) {
    const ref = { kind: builtinKinds.Secret, namespace: ns, name: secret.metadata.name! };
    found.set(referenceKey(ref), referenceTo(secret));
  }
  return found;
}

function referenceTo(obj: Readonly<KubeObject & { data?: Record<string, string> }>): Reference {
  const controller = obj.metadata.ownerReferences?.find((o) => o.controller)?.uid;
  return {
    ...(obj.metadata.resourceVersion !== undefined ? { resourceVersion: obj.metadata.resourceVersion } : {}),
    keys: Object.keys(obj.data ?? {}),
    ...(controller ? { controller } : {}),
  };
}
