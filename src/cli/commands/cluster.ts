/** `mlmodel cluster up|down|status|kubeconfig`: the local control plane. */
import { existsSync } from "node:fs";
import { parseArgs } from "node:util";
import {
  BinaryError,
  ClusterError,
  defaultClusterDir,
  down,
  gatewayApiVersion,
  kubeconfigPath,
  readState,
  status,
  up,
  versions,
} from "../../cluster/index.ts";
import { CliError } from "../errors.ts";

export const summary =
  "run a local Kubernetes control plane (etcd, apiserver, controller-manager, scheduler, kwok)";

const help = `Usage: mlmodel cluster <up|down|status|kubeconfig> [--dir DIR]

Runs Kubernetes ${versions.kubernetes} (etcd ${versions.etcd}, kwok ${versions.kwok} for fake nodes and pods)
on 127.0.0.1. Binaries come from MLMODEL_CONTROLPLANE_BIN_DIR, else a cache in
~/.cache/mlmodel (MLMODEL_CACHE_DIR), else are built from Go modules (needs Go 1.26+).

Commands:
  up           start a cluster and print its kubeconfig path
  down         stop every process of the cluster and remove its state
  status       each component's health (exit 1 when any is unhealthy)
  kubeconfig   print the kubeconfig path again

Flags:
  --dir DIR             state directory (default: ${defaultClusterDir()}); one cluster per dir
  --apiserver-port N    (up) serve the API on this port instead of a free one
  --nodes N             (up) number of kwok nodes, the first with one nvidia.com/gpu (default 3)
  --gateway-api         (up) also install the Gateway API CRDs (${gatewayApiVersion}, standard channel)

Examples:
  mlmodel cluster up
  kubectl --kubeconfig "$(mlmodel cluster kubeconfig)" get nodes
  mlmodel cluster up --dir /tmp/c2 --apiserver-port 16443
  mlmodel cluster down --dir /tmp/c2`;

function parse(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        dir: { type: "string" },
        "apiserver-port": { type: "string" },
        nodes: { type: "string" },
        "gateway-api": { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (err) {
    throw new CliError(`${(err as Error).message}\n\n${help}`, 2);
  }
}

function integerFlag(name: string, value: string | undefined, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new CliError(`--${name} must be a whole number from ${min} to ${max}, not "${value}"`, 2);
  }
  return n;
}

const log = (line: string) => console.error(`[cluster] ${line}`);

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv);
  const [action] = positionals;
  if (values.help || !action) {
    console.log(help);
    return action || values.help ? 0 : 2;
  }
  const dir = values.dir ?? defaultClusterDir();
  try {
    switch (action) {
      case "up": {
        const state = await up({
          dir,
          apiserverPort: integerFlag("apiserver-port", values["apiserver-port"], 1, 65535),
          nodes: integerFlag("nodes", values.nodes, 1, 1000),
          gatewayApi: values["gateway-api"] === true,
          progress: log,
        });
        console.error(`[cluster] Kubernetes ${state.kubernetesVersion} is up at ${state.server}`);
        console.error(`[cluster] kubeconfig: ${state.kubeconfig}`);
        console.error(`[cluster] try: kubectl --kubeconfig ${state.kubeconfig} get nodes`);
        console.log(state.kubeconfig);
        return 0;
      }
      case "down": {
        const result = await down(dir);
        console.error(
          result
            ? `[cluster] stopped ${result.stopped.length ? result.stopped.join(", ") : "nothing (no process was running)"}; removed ${dir}`
            : `[cluster] no cluster in ${dir}; nothing to stop`,
        );
        return 0;
      }
      case "status": {
        const result = await status(dir);
        if (!result) {
          console.log(`no cluster in ${dir} (start one with: mlmodel cluster up --dir ${dir})`);
          return 1;
        }
        console.log(
          `cluster ${result.state.server} (Kubernetes ${result.state.kubernetesVersion}), started ${result.state.startedAt}`,
        );
        for (const c of result.components) {
          console.log(
            `  ${c.component.padEnd(24)} pid ${String(c.pid).padEnd(8)} ${c.healthy ? "healthy" : "UNHEALTHY"}  ${c.detail}`,
          );
        }
        return result.components.every((c) => c.healthy) ? 0 : 1;
      }
      case "kubeconfig": {
        if (!(await readState(dir)) || !existsSync(kubeconfigPath(dir))) {
          throw new CliError(`no cluster in ${dir}; start one with: mlmodel cluster up --dir ${dir}`);
        }
        console.log(kubeconfigPath(dir));
        return 0;
      }
      default:
        throw new CliError(`unknown cluster command "${action}"; expected up, down, status or kubeconfig`, 2);
    }
  } catch (err) {
    if (err instanceof ClusterError || err instanceof BinaryError) throw new CliError(err.message);
    throw err;
  }
}
