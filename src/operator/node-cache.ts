/**
 * The operator's side of the node cache (docs/model-cache.md): finding it at start, reading
 * what its agents report in their state ConfigMaps, and turning that into a model's
 * status.cache. The agents and the commands model pods run are src/nodecache; the names they
 * share with the operator are src/nodecache/contract.ts.
 */
import type { MLModel, NodeCacheStatus } from "../api/mlmodel.ts";
import { shortBytes } from "../downloader/progress.ts";
import {
  cacheKey,
  type NodeCacheEntry,
  type NodeCacheFill,
  type NodeCacheState,
  nodeCacheComponentLabels,
  nodeCachePort,
  nodeCacheServiceName,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "../nodecache/contract.ts";
import { builtinKinds, type KubeClient, type KubeObject, type StoreChange } from "../runtime/index.ts";

/**
 * The node cache's URL: its Service's ClusterIP in the operator's namespace. The Service has
 * `internalTrafficPolicy: Local`, so this one URL reaches the agent of whichever node the
 * caller runs on. Undefined when the Service does not exist (no node cache installed) or has
 * no ClusterIP yet.
 */
export async function discoverNodeCache(
  client: Pick<KubeClient, "get">,
  namespace: string,
  signal?: AbortSignal,
): Promise<string | undefined> {
  const service = await client.get<KubeObject & { spec?: { clusterIP?: string } }>(
    builtinKinds.Service,
    { namespace, name: nodeCacheServiceName },
    { signal },
  );
  return nodeCacheUrlOf(service?.spec?.clusterIP);
}

/** http://<ClusterIP>:<port>, for an address a Service may have ("None" is headless: none). */
export function nodeCacheUrlOf(clusterIP: string | undefined): string | undefined {
  if (!clusterIP || clusterIP === "None") return undefined;
  const host = clusterIP.includes(":") ? `[${clusterIP}]` : clusterIP;
  return `http://${host}:${nodeCachePort}`;
}

/** Whether a ConfigMap is an agent's state: its name and the agents' labels. */
export function isNodeCacheState(cm: Readonly<KubeObject>): boolean {
  const labels = cm.metadata.labels ?? {};
  const prefix = nodeCacheStateConfigMap("");
  return (
    (cm.metadata.name ?? "").startsWith(prefix) &&
    Object.entries(nodeCacheComponentLabels).every(([k, v]) => labels[k] === v)
  );
}

/** Parsed states, by the cached object they were read from (the cache replaces it on change). */
const parsedStates = new WeakMap<object, NodeCacheState | null>();

/** The state an agent wrote, or undefined when the ConfigMap is none or holds no valid state. */
export function nodeCacheStateOf(cm: Readonly<KubeObject>): NodeCacheState | undefined {
  if (!isNodeCacheState(cm)) return undefined;
  const known = parsedStates.get(cm);
  if (known !== undefined) return known ?? undefined;
  const state = parseState((cm as { data?: Record<string, string> }).data?.[nodeCacheStateKey]);
  parsedStates.set(cm, state ?? null);
  return state;
}

function parseState(text: string | undefined): NodeCacheState | undefined {
  if (!text) return undefined;
  try {
    const state = JSON.parse(text) as Partial<NodeCacheState>;
    if (typeof state.node !== "string" || !Array.isArray(state.entries)) return undefined;
    const entries = state.entries.filter(
      (e): e is NodeCacheEntry => typeof e?.key === "string" && typeof e.size === "number",
    );
    const fills = (Array.isArray(state.fills) ? state.fills : []).filter(
      (f): f is NodeCacheFill =>
        typeof f?.key === "string" && typeof f.bytesDone === "number" && typeof f.bytesTotal === "number",
    );
    return { ...(state as NodeCacheState), entries, fills };
  } catch {
    // A state being written by a newer or broken agent is not ours to judge: shown as absent.
    return undefined;
  }
}

/** Index of state ConfigMaps by the cache keys they list. */
export const nodeCacheKeysIndex = "node-cache-keys";

/** The keys a state lists: held entries and copies under way. */
export function stateKeys(cm: Readonly<KubeObject>): string[] {
  const state = nodeCacheStateOf(cm);
  if (!state) return [];
  return [...new Set([...state.entries.map((e) => e.key), ...(state.fills ?? []).map((f) => f.key)])];
}

/** Index of MLModels by the cache keys they use: their spec's, and the one their status shows. */
export const modelCacheKeysIndex = "mlmodel-cache-keys";

export function modelCacheKeys(model: Readonly<MLModel>): string[] {
  const keys = new Set<string>();
  const m = model.spec?.model;
  if (m?.uri && !m.uri.startsWith("pvc://")) keys.add(cacheKey(m.uri, m.sha256));
  const shown = model.status?.cache?.key;
  if (shown) keys.add(shown);
  return [...keys];
}

/**
 * What status shows of a state's entries and copies under way: a change of anything else (times
 * of use) wakes no model.
 */
function entriesShown(cm: Readonly<KubeObject>): string {
  const state = nodeCacheStateOf(cm);
  return JSON.stringify([
    (state?.entries ?? []).map((e) => [e.key, e.size, e.files, e.source, e.peer, e.inUse]),
    (state?.fills ?? []).map((f) => [f.key, f.kind, f.peer, f.bytesDone, f.bytesTotal]),
  ]);
}

/** A state ConfigMap's change that changes what some model's status.cache shows. */
export function stateShownChanged(change: StoreChange): boolean {
  if (!isNodeCacheState(change.object)) return false;
  if (change.type !== "update") return true;
  return entriesShown(change.old) !== entriesShown(change.object);
}

/**
 * status.cache of a model whose version is `key`: each node whose agent holds it, with where
 * it came from, and the bytes fetched from the origin vs copied from peers over those nodes.
 * Nodes by name, so the status does not move when the agents report in another order; no
 * time of use or report, so an agent's routine report writes no status.
 */
export function nodeCacheStatus(
  key: string,
  url: string,
  states: readonly NodeCacheState[],
  now?: number,
): NodeCacheStatus {
  const nodes: NonNullable<NodeCacheStatus["nodes"]> = [];
  let fromOrigin = 0;
  let fromPeers = 0;
  for (const state of states) {
    const entry = state.entries.find((e) => e.key === key);
    if (!entry) continue;
    if (entry.source === "origin") fromOrigin += entry.size;
    else fromPeers += entry.size;
    nodes.push({
      node: state.node,
      size: entry.size,
      files: entry.files,
      source: entry.source === "origin" ? "Origin" : "Peer",
      ...(entry.source === "peer" && entry.peer ? { peer: entry.peer } : {}),
      inUse: entry.inUse,
      ...(entry.completedAt ? { completedAt: entry.completedAt } : {}),
    });
  }
  nodes.sort((a, b) => a.node.localeCompare(b.node));
  const fill = fillOf(key, states, now);
  return {
    key,
    url,
    nodes,
    nodesCached: nodes.length,
    bytesFromOrigin: fromOrigin,
    bytesFromPeers: fromPeers,
    ...(fill ? { fill, progress: fillProgressText(fill) } : {}),
  };
}

export type NodeCacheFillStatus = NonNullable<NodeCacheStatus["fill"]>;

/**
 * An agent copying something writes its state whenever bytes moved, at most once per its state
 * interval (5 s by default): copies in a state older than this are no longer reported by a
 * running agent (its node stopped or is cut off) and are not shown as under way.
 */
export const fillReportMaxAgeMs = 60_000;

/**
 * The copies of `key` under way, summed over the nodes whose agents report them; undefined when
 * none is. With `now`, a state not written for fillReportMaxAgeMs counts for none.
 */
export function fillOf(
  key: string,
  states: readonly NodeCacheState[],
  now?: number,
): NodeCacheFillStatus | undefined {
  const nodes = new Set<string>();
  let copies = 0;
  let bytesDone = 0;
  let bytesTotal = 0;
  let bytesPerSecond = 0;
  for (const state of states) {
    if (now !== undefined && !(now - Date.parse(state.updatedAt) < fillReportMaxAgeMs)) continue;
    for (const f of state.fills ?? []) {
      if (f.key !== key) continue;
      nodes.add(state.node);
      copies++;
      bytesDone += Math.min(f.bytesDone, f.bytesTotal);
      bytesTotal += f.bytesTotal;
      bytesPerSecond += f.bytesPerSecond ?? 0;
    }
  }
  if (copies === 0) return undefined;
  return { nodes: nodes.size, copies, bytesDone, bytesTotal, bytesPerSecond };
}

/** The Cache column: "3 copies on 2 nodes: 45% 1.8Mi/4.0Mi 12Mi/s". */
export function fillProgressText(fill: NodeCacheFillStatus): string {
  const copies = `${fill.copies} ${fill.copies === 1 ? "copy" : "copies"}`;
  const nodes = `${fill.nodes} ${fill.nodes === 1 ? "node" : "nodes"}`;
  const total = fill.bytesTotal ?? 0;
  const done = fill.bytesDone ?? 0;
  const pct = total > 0 ? Math.min(100, Math.floor((100 * done) / total)) : 0;
  return `${copies} on ${nodes}: ${pct}% ${shortBytes(done)}/${shortBytes(total)} ${shortBytes(Math.round(fill.bytesPerSecond ?? 0))}/s`;
}
