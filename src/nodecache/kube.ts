// The agent's Kubernetes side, through the runtime's client: its peers from the EndpointSlices
// of the node cache's Service, the keys in use from a metadata-only list of the pods on its
// node, and its state written to its ConfigMap by server-side apply.
import type { KubeClient, KubeObject, ResourceKind } from "../runtime/index.ts";
import { builtinKinds, metadataListAccept } from "../runtime/index.ts";
import type { Peer } from "./agent.ts";
import {
  cacheKeyLabel,
  type NodeCacheState,
  nodeCacheComponentLabels,
  nodeCachePort,
  nodeCacheServiceName,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "./contract.ts";

export const endpointSliceKind: ResourceKind = Object.freeze({
  group: "discovery.k8s.io",
  version: "v1",
  kind: "EndpointSlice",
  plural: "endpointslices",
  namespaced: true,
});

/** The field manager of the agent's writes (its state ConfigMap). */
export const agentFieldManager = "mlmodel-node-cache";

interface EndpointSlice extends KubeObject {
  addressType?: string;
  endpoints?: Array<{ addresses?: string[]; nodeName?: string; conditions?: { ready?: boolean } }>;
  ports?: Array<{ name?: string; port?: number }> | null;
}

/** The other agents in these slices: ready endpoints on other nodes, one per node. */
export function peersFromSlices(
  slices: readonly Pick<EndpointSlice, "endpoints" | "ports">[],
  selfNode: string,
): Peer[] {
  const peers = new Map<string, Peer>();
  for (const slice of slices) {
    const port = slice.ports?.find((p) => p.port !== undefined)?.port ?? nodeCachePort;
    for (const ep of slice.endpoints ?? []) {
      const address = ep.addresses?.[0];
      if (!address || !ep.nodeName || ep.nodeName === selfNode || ep.conditions?.ready === false) continue;
      const host = address.includes(":") ? `[${address}]` : address;
      if (!peers.has(ep.nodeName))
        peers.set(ep.nodeName, { node: ep.nodeName, url: `http://${host}:${port}` });
    }
  }
  return [...peers.values()].sort((a, b) => (a.node < b.node ? -1 : 1));
}

export async function listPeers(client: KubeClient, namespace: string, selfNode: string): Promise<Peer[]> {
  const { items } = await client.list<EndpointSlice>(endpointSliceKind, {
    namespace,
    labelSelector: `kubernetes.io/service-name=${nodeCacheServiceName}`,
    withoutManagedFields: true,
  });
  return peersFromSlices(items, selfNode);
}

/** The cache keys that pods on `node` carry, in every namespace (metadata only). */
export async function listInUseKeys(client: KubeClient, node: string): Promise<Set<string>> {
  const keys = new Set<string>();
  let cont: string | undefined;
  do {
    const page = await client.list(builtinKinds.Pod, {
      labelSelector: cacheKeyLabel,
      fieldSelector: `spec.nodeName=${node}`,
      accept: metadataListAccept,
      withoutManagedFields: true,
      limit: 500,
      ...(cont ? { continue: cont } : {}),
    });
    for (const pod of page.items) {
      const key = pod.metadata?.labels?.[cacheKeyLabel];
      if (key) keys.add(key);
    }
    cont = page.continue;
  } while (cont);
  return keys;
}

/** The state ConfigMap as the agent applies it. */
export function stateConfigMap(namespace: string, state: NodeCacheState): KubeObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name: nodeCacheStateConfigMap(state.node),
      namespace,
      labels: { ...nodeCacheComponentLabels },
    },
    data: { [nodeCacheStateKey]: `${JSON.stringify(state, null, 1)}\n` },
  } as KubeObject;
}

/**
 * Writes the state when it changed (updatedAt aside), at most once per `minIntervalMs`; a
 * failed write is retried at the next interval.
 */
export class StateWriter {
  readonly #client: KubeClient;
  readonly #namespace: string;
  readonly #read: () => NodeCacheState;
  readonly #minIntervalMs: number;
  readonly #log: (line: string) => void;
  #lastWritten = "";
  #lastAt = 0;
  #timer: NodeJS.Timeout | undefined;
  #writing: Promise<void> | undefined;
  writes = 0;

  constructor(
    client: KubeClient,
    namespace: string,
    read: () => NodeCacheState,
    opts: { minIntervalMs: number; log: (line: string) => void },
  ) {
    this.#client = client;
    this.#namespace = namespace;
    this.#read = read;
    this.#minIntervalMs = opts.minIntervalMs;
    this.#log = opts.log;
  }

  /** Something changed: a write is due within the interval. */
  changed(): void {
    if (this.#timer) return;
    const wait = Math.max(0, this.#lastAt + this.#minIntervalMs - Date.now());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.flush();
    }, wait);
  }

  /** Writes now if the state differs from the last one written. */
  async flush(): Promise<void> {
    await this.#writing;
    this.#writing = this.#write();
    await this.#writing;
    this.#writing = undefined;
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  async #write(): Promise<void> {
    const state = this.#read();
    const comparable = JSON.stringify({ ...state, updatedAt: "" });
    if (comparable === this.#lastWritten) return;
    this.#lastAt = Date.now();
    try {
      await this.#client.applyDiscardingAnswer(
        builtinKinds.ConfigMap,
        stateConfigMap(this.#namespace, state),
        {
          fieldManager: agentFieldManager,
          force: true,
        },
      );
      this.#lastWritten = comparable;
      this.writes++;
    } catch (err) {
      this.#log(
        `warning: cannot write state ConfigMap ${nodeCacheStateConfigMap(state.node)}: ${(err as Error).message}`,
      );
      this.changed();
    }
  }
}
