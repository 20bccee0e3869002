/** `mlmodel operator`: runs the MLModel operator against a cluster until SIGINT/SIGTERM. */
import type { Logger } from "pino";
import { defaultConcurrency } from "../../operator/mlmodel/controller.ts";
import { defaultOperatorConfig } from "../../operator/plan.ts";
import { createOperator } from "../../operator/run.ts";
import {
  KubeClient,
  KubeConfigError,
  kubeConnection,
  loadKubeConfig,
  shutdownSignal,
} from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { checkedLevel, humanLogger, jsonLogger } from "../log.ts";

// node:util through getBuiltinModule, not `import`: an ES import of a built-in reads every
// export, and node:util's lazy ones load internal modules the operator never uses (its diff,
// locks, colors...; see src/runtime/server.ts).
const { parseArgs } = process.getBuiltinModule("node:util");

export const summary = "run the MLModel operator (controllers, metrics, health probes)";

const help = `Usage: mlmodel operator [flags]

Runs the MLModel controller: it watches MLModels and their children and serves models.

Flags:
  --kubeconfig PATH                 cluster to manage (default: $KUBECONFIG, ~/.kube/config, in-cluster)
  --namespace NS                    only manage MLModels in NS; repeat for several (default: all)
  --metrics-bind-address ADDR       serve Prometheus /metrics on host:port, ":port", or 0 to disable (default :8080)
  --health-probe-bind-address ADDR  serve /healthz and /readyz on host:port, ":port", or 0 (default :8081)
  --leader-elect                    run as one of several replicas: only the Lease holder reconciles
  --leader-election-namespace NS    namespace of the Lease (default: $POD_NAMESPACE or mlmodel-system)
  --concurrency N                   MLModels reconciled in parallel (default ${defaultConcurrency})
  --readiness-grace-period SECONDS  /readyz fails once a cache's list/watch has failed this long
                                    with no answer from the API server (default 10; 0 never fails)
  --downloader-image IMAGE          image whose \`mlmodel download\` fills model storage
                                    (default ${defaultOperatorConfig.downloaderImage})
  --node-cache-url URL              the node cache's URL for the pods the operator builds, or
                                    none; default: its Service mlmodel-node-cache in the
                                    operator's namespace ($POD_NAMESPACE), looked up at start
  --log-level LEVEL                 trace, debug, info, warn or error (default info)
  --log-format FORMAT               json, or text: one short line per record for a terminal,
                                    no stack trace for errors the operator handles (default json)

Examples:
  mlmodel operator --kubeconfig ~/.kube/config --namespace models
  mlmodel operator --leader-elect --metrics-bind-address :8080 --log-format text`;

function parse(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      options: {
        kubeconfig: { type: "string" },
        namespace: { type: "string", multiple: true },
        "metrics-bind-address": { type: "string", default: ":8080" },
        "health-probe-bind-address": { type: "string", default: ":8081" },
        "leader-elect": { type: "boolean", default: false },
        "leader-election-namespace": { type: "string" },
        concurrency: { type: "string", default: String(defaultConcurrency) },
        "readiness-grace-period": { type: "string", default: "10" },
        "downloader-image": { type: "string", default: defaultOperatorConfig.downloaderImage },
        "node-cache-url": { type: "string" },
        "log-level": { type: "string", default: "info" },
        "log-format": { type: "string", default: "json" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    throw new CliError(`${(err as Error).message}\n\n${help}`, 2);
  }
}

export function loggerFor(level: string, format: string): Logger {
  checkedLevel(level, "--log-level");
  if (format !== "json" && format !== "text")
    throw new CliError(`--log-format "${format}" must be json or text`, 2);
  return format === "json" ? jsonLogger(level) : humanLogger(level);
}

/**
 * The operator's client, through the runtime's own kubeconfig loader: the operator process
 * never imports @kubernetes/client-node, which would cost about 85 MiB of memory.
 */
function operatorClient(path: string | undefined): KubeClient {
  try {
    return new KubeClient(kubeConnection(loadKubeConfig(path ? { path } : {})), {
      userAgent: "mlmodel-operator",
    });
  } catch (err) {
    if (!(err instanceof KubeConfigError)) throw err;
    throw new CliError(
      `cannot load kubeconfig ${path ?? "(default)"}: ${err.message}; pass --kubeconfig PATH or set KUBECONFIG (or run \`mlmodel start\`)`,
    );
  }
}

/** An http(s) URL, or "none". */
function checkedNodeCacheUrl(value: string): string {
  if (value === "none") return value;
  try {
    const url = new URL(value);
    if (url.protocol === "http:" || url.protocol === "https:") return value.replace(/\/+$/, "");
  } catch {}
  throw new CliError(
    `--node-cache-url "${value}" must be an http:// or https:// URL such as http://10.96.0.20:8375, or none`,
    2,
  );
}

export async function run(argv: string[]): Promise<number> {
  const flags = parse(argv);
  if (flags.help) {
    console.log(help);
    return 0;
  }
  const concurrency = Number(flags.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    throw new CliError(`--concurrency "${flags.concurrency}" must be a whole number from 1 to 64`, 2);
  }
  const grace = Number(flags["readiness-grace-period"]);
  if (!Number.isFinite(grace) || grace < 0 || grace > 3600) {
    throw new CliError(
      `--readiness-grace-period "${flags["readiness-grace-period"]}" must be a number of seconds from 0 to 3600 (0: an unreachable API server never fails /readyz)`,
      2,
    );
  }
  const logger = loggerFor(flags["log-level"], flags["log-format"]);
  const client = operatorClient(flags.kubeconfig);
  let mgr: Awaited<ReturnType<typeof createOperator>>;
  try {
    mgr = await createOperator({
      client,
      namespaces: flags.namespace,
      metricsBindAddress: flags["metrics-bind-address"],
      healthProbeBindAddress: flags["health-probe-bind-address"],
      leaderElectionNamespace: flags["leader-elect"]
        ? (flags["leader-election-namespace"] ?? process.env.POD_NAMESPACE ?? "mlmodel-system")
        : undefined,
      concurrency,
      healthGracePeriodMs: grace === 0 ? Number.POSITIVE_INFINITY : grace * 1000,
      downloaderImage: flags["downloader-image"],
      ...(flags["node-cache-url"] ? { nodeCacheUrl: checkedNodeCacheUrl(flags["node-cache-url"]) } : {}),
      ...(process.env.POD_NAMESPACE ? { nodeCacheNamespace: process.env.POD_NAMESPACE } : {}),
      logger,
    });
  } catch (err) {
    // Bad flag values the runtime rejects (namespaces, bind addresses) are usage errors.
    if (err instanceof TypeError) throw new CliError(err.message, 2);
    throw err;
  }
  logger.info(
    { namespaces: flags.namespace ?? "all", leaderElect: flags["leader-elect"], concurrency },
    "starting the MLModel operator",
  );
  await mgr.start(shutdownSignal());
  return 0;
}
