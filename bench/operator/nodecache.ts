/**
 * The nodecache path's own figures: where the serving pods landed (pods per node, and whether
 * each model's replicas are on distinct nodes), and the agents' state ConfigMaps the benchmark
 * writes by hand (kwok runs no agent) to count what a report costs the operator.
 */
import {
  type NodeCacheState,
  nodeCacheComponentLabels,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "../../src/nodecache/contract.ts";
import type { KubeObject } from "../../src/runtime/index.ts";

/** The URL the operator is given on the nodecache path: nothing answers it (kwok runs no pod). */
export const benchNodeCacheUrl = "http://10.96.0.250:8375";

/** The fields of a pod the placement needs. */
export interface PlacedPod {
  model: string;
  node: string | undefined;
  /** Its init containers (cache-copy on the nodecache path) and how many ended Completed. */
  initContainers?: number;
  initCompleted?: number;
  /** Seconds from its creation to its Ready condition (whole seconds, the API's resolution). */
  readyAfter?: number;
}

export interface Placement {
  /** Serving pods by node name (unscheduled ones under "-"). */
  podsByNode: Record<string, number>;
  nodes: number;
  minPerNode: number;
  maxPerNode: number;
  /** Models whose replicas all run on distinct nodes, and those with two or more on one node. */
  modelsOnDistinctNodes: number;
  modelsSharingANode: number;
  /** Pods with init containers, and those whose every init container ended Completed (kwok's pod-ready stage). */
  podsWithInitContainers: number;
  podsInitCompleted: number;
  /** Creation -> Ready over the pods (kwok sets Ready once it sees the pod scheduled). */
  readyAfter?: { p50: number; p90: number; max: number };
}

/** Where serving pods landed: pods per node and how each model's replicas spread. */
export function placementOf(pods: readonly PlacedPod[]): Placement {
  const podsByNode: Record<string, number> = {};
  const nodesOfModel = new Map<string, string[]>();
  for (const p of pods) {
    const node = p.node ?? "-";
    podsByNode[node] = (podsByNode[node] ?? 0) + 1;
    nodesOfModel.set(p.model, [...(nodesOfModel.get(p.model) ?? []), node]);
  }
  const counts = Object.entries(podsByNode)
    .filter(([node]) => node !== "-")
    .map(([, n]) => n);
  const withInit = pods.filter((p) => (p.initContainers ?? 0) > 0);
  let distinct = 0;
  for (const nodes of nodesOfModel.values()) if (new Set(nodes).size === nodes.length) distinct++;
  return {
    podsByNode: Object.fromEntries(Object.entries(podsByNode).sort(([a], [b]) => a.localeCompare(b))),
    nodes: counts.length,
    minPerNode: counts.length ? Math.min(...counts) : 0,
    maxPerNode: counts.length ? Math.max(...counts) : 0,
    modelsOnDistinctNodes: distinct,
    modelsSharingANode: nodesOfModel.size - distinct,
    podsWithInitContainers: withInit.length,
    podsInitCompleted: withInit.filter((p) => p.initCompleted === p.initContainers).length,
    ...readiness(pods),
  };
}

function readiness(pods: readonly PlacedPod[]): Pick<Placement, "readyAfter"> {
  const after = pods
    .map((p) => p.readyAfter)
    .filter((s) => s !== undefined)
    .sort((a, b) => a - b);
  if (after.length === 0) return {};
  const at = (q: number) => after[Math.min(after.length - 1, Math.floor(q * after.length))]!;
  return { readyAfter: { p50: at(0.5), p90: at(0.9), max: after.at(-1)! } };
}

/** A serving pod (a ReplicaSet's, not a download Job's) as a {@link PlacedPod}, else undefined. */
export function servingPod(pod: Readonly<KubeObject>, modelLabel: string): PlacedPod | undefined {
  const model = pod.metadata.labels?.[modelLabel];
  const owner = pod.metadata.ownerReferences?.[0]?.kind;
  if (!model || owner !== "ReplicaSet") return undefined;
  const { spec, status } = pod as {
    spec?: { nodeName?: string; initContainers?: unknown[] };
    status?: {
      initContainerStatuses?: { state?: { terminated?: { reason?: string } } }[];
      conditions?: { type: string; status: string; lastTransitionTime?: string }[];
    };
  };
  const ready = status?.conditions?.find((c) => c.type === "Ready" && c.status === "True");
  const created = Date.parse(pod.metadata.creationTimestamp ?? "");
  const readyAt = Date.parse(ready?.lastTransitionTime ?? "");
  return {
    model,
    node: spec?.nodeName,
    initContainers: spec?.initContainers?.length ?? 0,
    initCompleted: (status?.initContainerStatuses ?? []).filter(
      (s) => s.state?.terminated?.reason === "Completed",
    ).length,
    ...(Number.isNaN(created) || Number.isNaN(readyAt) ? {} : { readyAfter: (readyAt - created) / 1000 }),
  };
}

/**
 * The state ConfigMap an agent on `node` would write holding every key of `keys`: an entry of
 * `size` bytes each, from the origin on `originNode` and from a peer (that node) elsewhere, in
 * use where `inUse` says a pod of that key runs on this node.
 */
export function agentStateConfigMap(opts: {
  node: string;
  namespace: string;
  keys: readonly string[];
  originNode: string;
  inUse: (key: string) => boolean;
  size: number;
  /** When each entry was completed (default `now`); `now` is the time of use and of the report. */
  completedAt?: string;
  now: string;
}): KubeObject & { data: Record<string, string> } {
  const origin = opts.node === opts.originNode;
  const entries = opts.keys.map((key) => ({
    key,
    uri: "https://models.example.com/bench/model.tar.gz",
    size: opts.size,
    files: 1,
    source: origin ? ("origin" as const) : ("peer" as const),
    ...(origin ? {} : { peer: opts.originNode }),
    completedAt: opts.completedAt ?? opts.now,
    lastUsedAt: opts.now,
    inUse: opts.inUse(key),
  }));
  const used = entries.length * opts.size;
  const state: NodeCacheState = {
    node: opts.node,
    budgetBytes: Math.max(used, 1) * 2,
    usedBytes: used,
    bytesFromPeers: origin ? 0 : used,
    bytesFromOrigin: origin ? used : 0,
    evictions: 0,
    entries,
    updatedAt: opts.now,
  };
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name: nodeCacheStateConfigMap(opts.node),
      namespace: opts.namespace,
      labels: { ...nodeCacheComponentLabels },
    },
    data: { [nodeCacheStateKey]: JSON.stringify(state) },
  };
}

/** The audit log's "verb resource" counts split into the models' status and everything else. */
export function splitStatusWrites(byVerbResource: Readonly<Record<string, number>>): {
  status: number;
  other: Record<string, number>;
} {
  let status = 0;
  const other: Record<string, number> = {};
  for (const [key, n] of Object.entries(byVerbResource)) {
    if (key.endsWith("mlmodels/status")) status += n;
    else other[key] = n;
  }
  return { status, other };
}
