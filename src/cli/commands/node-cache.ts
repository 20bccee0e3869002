// `mlmodel node-cache`: the node cache agent, one pod per node (a DaemonSet). Serves the cache
// on its node, copies missing entries from peers, reports its state to its ConfigMap. SIGTERM
// or SIGINT stop it: it ends the requests in flight and writes its state a last time.
import { parseArgs } from "node:util";
import { NodeCacheAgent } from "../../nodecache/agent.ts";
import { nodeCachePort } from "../../nodecache/contract.ts";
import { listInUseKeys, listPeers, StateWriter } from "../../nodecache/kube.ts";
import { ContentStore } from "../../nodecache/store.ts";
import { KubeClient, kubeConnection, loadKubeConfig } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { parseSize } from "./download.ts";

export const summary = "run the node cache agent (one per node, in the operator's namespace)";

const help = `Usage: mlmodel node-cache --dir DIR --budget SIZE [--node NAME] [--namespace NS] [--port N]

Flags:
  --dir DIR          the cache's directory (an emptyDir whose sizeLimit is the budget)
  --budget SIZE      the cache directory's size (its emptyDir's sizeLimit), e.g. 200Gi: entries
                     may take it less 1% (at least 16Mi) kept for the cache's own files; least
                     recently used entries no pod serves are evicted to stay under it
  --node NAME        this node's name (default: env NODE_NAME, from the downward API)
  --namespace NS     the agent's namespace (default: env POD_NAMESPACE, from the downward API)
  --port N           HTTP port (default ${nodeCachePort})
  --state-interval S seconds between two writes of the state ConfigMap at most (default 5)
  --in-use-interval S seconds between two reads of the keys in use for the state (default 10)
  --upload-idle-timeout S  seconds an upload may receive nothing before it is dropped (default 600)

The HTTP API, the state ConfigMap and failure handling: docs/node-cache-agent.md.`;

function flags(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      strict: true,
      options: {
        dir: { type: "string" },
        budget: { type: "string" },
        node: { type: "string" },
        namespace: { type: "string" },
        port: { type: "string" },
        "state-interval": { type: "string" },
        "in-use-interval": { type: "string" },
        "upload-idle-timeout": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    throw new CliError(`${(err as Error).message}\n\n${help}`, 2);
  }
}

function required(flag: string, value: string | undefined, env?: string): string {
  if (value) return value;
  const fromEnv = env ? process.env[env] : undefined;
  if (fromEnv) return fromEnv;
  throw new CliError(
    `${flag} is required${env ? ` (or env ${env}, set by the downward API)` : ""}\n\n${help}`,
    2,
  );
}

function positiveNumber(flag: string, value: string | undefined, fallback: number, max = Infinity): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || n > max)
    throw new CliError(
      `${flag} "${value}" must be a number above 0${max < Infinity ? ` and at most ${max}` : ""}`,
      2,
    );
  return n;
}

/** A budget lowered since the last run: least recently used entries go until the rest fit. */
async function fitBudget(
  store: ContentStore,
  inUse: () => Promise<ReadonlySet<string>>,
  log: (l: string) => void,
) {
  if (store.usedBytes <= store.budgetBytes) return;
  try {
    const evicted = await store.reserve("budget", 0, inUse);
    log(`evicted ${evicted.join(", ")}: the entries held more than the budget of ${store.budgetBytes} bytes`);
  } catch (err) {
    log(
      `warning: the entries hold ${store.usedBytes} bytes, over the budget, and cannot all go: ${(err as Error).message}`,
    );
  }
}

/**
 * The bytes entries may take of a cache whose emptyDir is `sizeLimit` bytes: the kubelet evicts
 * the agent when the directory's blocks pass its sizeLimit, and the entries' manifests, the
 * directories and the last block of each file take room the entries' sizes do not count. 1% is
 * kept for them, and at least 16 MiB.
 */
export function entriesBudget(sizeLimit: number): number {
  return Math.floor(sizeLimit - Math.max(sizeLimit / 100, 16 * 1024 * 1024));
}

export async function run(argv: string[]): Promise<number> {
  const f = flags(argv);
  if (f.help) {
    console.log(help);
    return 0;
  }
  const dir = required("--dir", f.dir);
  const sizeLimit = parseSize("--budget", required("--budget", f.budget));
  const budget = entriesBudget(sizeLimit);
  if (budget <= 0)
    throw new CliError(
      `--budget "${f.budget}" leaves no room for entries once ${sizeLimit - budget} bytes are kept for the cache's own files: give at least 64Mi`,
      2,
    );
  const node = required("--node", f.node, "NODE_NAME");
  const namespace = required("--namespace", f.namespace, "POD_NAMESPACE");
  const port = positiveNumber("--port", f.port, nodeCachePort, 65535);
  const stateIntervalMs = positiveNumber("--state-interval", f["state-interval"], 5) * 1000;
  const inUseIntervalMs = positiveNumber("--in-use-interval", f["in-use-interval"], 10) * 1000;
  const uploadIdleMs = positiveNumber("--upload-idle-timeout", f["upload-idle-timeout"], 600) * 1000;
  const log = (line: string) => process.stderr.write(`${new Date().toISOString()} ${line}\n`);

  const client = new KubeClient(kubeConnection(loadKubeConfig()), { userAgent: "mlmodel-node-cache" });
  const store = await ContentStore.open(dir, budget);
  let writer: StateWriter | undefined;
  const agent = new NodeCacheAgent({
    store,
    node,
    peers: () => listPeers(client, namespace, node),
    inUseKeys: () => listInUseKeys(client, node),
    log,
    onChange: () => writer?.changed(),
  });
  writer = new StateWriter(client, namespace, () => agent.state(), { minIntervalMs: stateIntervalMs, log });
  const refresh = () =>
    agent
      .refreshInUse()
      .catch((err: unknown) => log(`warning: cannot list the pods on ${node}: ${(err as Error).message}`));
  await refresh();
  await fitBudget(store, () => listInUseKeys(client, node), log);
  const url = await agent.listen(port);
  log(
    `node cache agent of ${node} on ${url}: ${store.entries().length} entries, ${store.usedBytes} of ${budget} bytes in ${dir}`,
  );
  writer.changed();
  const timer = setInterval(() => {
    void refresh();
    agent.discardIdleUploads(uploadIdleMs).catch((err: unknown) => log(`warning: ${(err as Error).message}`));
  }, inUseIntervalMs);

  await new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  log("stopping");
  clearInterval(timer);
  writer.stop();
  await agent.close();
  await writer.flush();
  return 0;
}
