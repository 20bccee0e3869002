/** Builds the operator process: a Manager with the MLModel controller registered. */
import type { KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { mlModelKind } from "../api/kinds.ts";
import type { MLModel } from "../api/mlmodel.ts";
import { nodeCacheServiceName } from "../nodecache/contract.ts";
import { KubeClient, kubeConnection, loadKubeConfig, Manager } from "../runtime/index.ts";
import { registerBuildInfo } from "./build-info.ts";
import { registerModelMetrics } from "./metrics.ts";
import { addMLModelController } from "./mlmodel/controller.ts";
import { operatorName } from "./names.ts";
import { discoverNodeCache } from "./node-cache.ts";
import { defaultOperatorConfig, type OperatorConfig } from "./plan.ts";

export interface OperatorOptions extends Partial<OperatorConfig> {
  kubeConfig?: KubeConfig;
  client?: KubeClient;
  namespaces?: string[];
  metricsBindAddress?: string;
  healthProbeBindAddress?: string;
  /** Namespace of the leader-election Lease; leader election is off when undefined. */
  leaderElectionNamespace?: string;
  concurrency?: number;
  /** /readyz fails after a cache's list/watch failed this long with no answer (runtime default 10 s). */
  healthGracePeriodMs?: number;
  /** How often to ask whether the Gateway API (HTTPRoute) is served (runtime default 30 s). */
  servedPollIntervalMs?: number;
  logger?: Logger;
  /** Compact the heap once work is quiet after a burst (runtime ManagerOptions; default on). */
  reclaimHeapWhenQuiet?: boolean;
  /**
   * The node cache's URL; "none": no node cache. Without it the operator looks for the node
   * cache's Service in nodeCacheNamespace at start.
   */
  nodeCacheUrl?: string;
}

export const leaseName = "mlmodel-operator";

/**
 * The node cache the operator's models may use, found once at start: a given URL ("none":
 * none), else its Service in the operator's namespace. Found at start only: installing or
 * removing the node cache takes an operator restart (the Helm chart installs both together).
 * A refused or failed look is no node cache, said in the log: models then use claims.
 */
async function findNodeCache(
  client: KubeClient,
  options: OperatorOptions,
  log: Pick<Logger, "warn">,
): Promise<{ url?: string; namespace?: string; via?: string }> {
  if (options.nodeCacheUrl === "none") return {};
  if (options.nodeCacheUrl) return { url: options.nodeCacheUrl, via: "--node-cache-url" };
  const namespace = options.nodeCacheNamespace;
  if (!namespace) return {};
  try {
    const url = await discoverNodeCache(client, namespace);
    return url ? { url, namespace, via: `Service ${namespace}/${nodeCacheServiceName}` } : {};
  } catch (err) {
    log.warn(
      { err: (err as Error).message, namespace },
      `could not read Service ${nodeCacheServiceName}: models use claims, not the node cache`,
    );
    return {};
  }
}

export async function createOperator(options: OperatorOptions): Promise<Manager> {
  // Without a client-node KubeConfig, the runtime's own loader: client-node is not imported.
  const client =
    options.client ??
    (options.kubeConfig
      ? KubeClient.fromKubeConfig(options.kubeConfig, { userAgent: operatorName })
      : new KubeClient(kubeConnection(loadKubeConfig()), { userAgent: operatorName }));
  const mgr = new Manager({
    kubeConfig: options.kubeConfig,
    client,
    namespaces: options.namespaces,
    metricsBindAddress: options.metricsBindAddress,
    healthProbeBindAddress: options.healthProbeBindAddress,
    logger: options.logger,
    healthGracePeriodMs: options.healthGracePeriodMs,
    ...(options.servedPollIntervalMs !== undefined
      ? { servedPollIntervalMs: options.servedPollIntervalMs }
      : {}),
    reportingController: "serving.mlmodel.dev/operator",
    // A burst of models leaves V8 holding pages it no longer needs.
    reclaimHeapWhenQuiet: options.reclaimHeapWhenQuiet ?? true,
    ...(options.leaderElectionNamespace
      ? { leaderElection: { name: leaseName, namespace: options.leaderElectionNamespace } }
      : {}),
  });
  const nodeCache = await findNodeCache(client, options, mgr.log);
  if (nodeCache.url) mgr.log.info(nodeCache, "models may use the node cache");
  const watched = options.namespaces ?? [];
  const statesWatched =
    watched.length === 0 ||
    (options.nodeCacheNamespace !== undefined && watched.includes(options.nodeCacheNamespace));
  if (nodeCache.url && !statesWatched) {
    mgr.log.warn(
      { namespaces: watched, nodeCacheNamespace: options.nodeCacheNamespace },
      "the node cache's namespace is not watched: status.cache lists no node (add it to --namespace to see the agents' reports)",
    );
  }
  addMLModelController(mgr, {
    downloaderImage: options.downloaderImage ?? defaultOperatorConfig.downloaderImage,
    ...(nodeCache.url ? { nodeCacheUrl: nodeCache.url } : {}),
    ...(options.nodeCacheNamespace ? { nodeCacheNamespace: options.nodeCacheNamespace } : {}),
    nodeCacheStatesWatched: statesWatched,
    concurrency: options.concurrency,
  });
  // Per-model metrics, read from the controller's MLModel cache at each scrape.
  registerModelMetrics(mgr.metrics.registry, mgr.cache<MLModel>(mlModelKind));
  registerBuildInfo(mgr.metrics.registry);
  return mgr;
}
