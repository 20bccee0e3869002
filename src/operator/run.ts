/** Builds the operator process: a Manager with the MLModel controller registered. */
import type { KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { mlModelKind } from "../api/kinds.ts";
import type { MLModel } from "../api/mlmodel.ts";
import { KubeClient, kubeConnection, loadKubeConfig, Manager } from "../runtime/index.ts";
import { registerBuildInfo } from "./build-info.ts";
import { registerModelMetrics } from "./metrics.ts";
import { addMLModelController } from "./mlmodel/controller.ts";
import { operatorName } from "./names.ts";
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
}

export const leaseName = "mlmodel-operator";

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
  addMLModelController(mgr, {
    downloaderImage: options.downloaderImage ?? defaultOperatorConfig.downloaderImage,
    concurrency: options.concurrency,
  });
  // Per-model metrics, read from the controller's MLModel cache at each scrape.
  registerModelMetrics(mgr.metrics.registry, mgr.cache<MLModel>(mlModelKind));
  registerBuildInfo(mgr.metrics.registry);
  return mgr;
}
