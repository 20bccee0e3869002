/** `mlmodel cluster up|down|status|kubeconfig|load-image`: the local control plane (and its real node). */
import { existsSync } from "node:fs";
import { parseArgs } from "node:util";
import {
  BinaryError,
  ClusterError,
  defaultClusterDir,
  down,
  gatewayApiVersion,
  kubeconfigPath,
  kwokTaint,
  loadImage,
  multiNodeDefaults,
  NodeError,
  nodeFault,
  nodeFaults,
  readState,
  realNodeDefaults,
  status,
  up,
  versions,
} from "../../cluster/index.ts";
import { prometheusUrl } from "../../cluster/prometheus.ts";
import { CliError } from "../errors.ts";

export const summary =
  "run a local Kubernetes control plane (etcd, apiserver, controller-manager, scheduler, kwok)";

const help = `Usage: mlmodel cluster <up|down|status|kubeconfig|load-image|node> [--dir DIR]

Runs Kubernetes ${versions.kubernetes} (etcd ${versions.etcd}, kwok ${versions.kwok} for fake nodes and pods)
on 127.0.0.1. Binaries come from MLMODEL_CONTROLPLANE_BIN_DIR, else a cache in
~/.cache/mlmodel (MLMODEL_CACHE_DIR), else are built from Go modules (needs Go 1.26+).

With --real-node (Linux, root) a real node joins: kubelet, containerd + runc, kube-proxy and a
storage provisioner, so pods really run. Missing Debian packages are installed with apt-get.
One real node per machine. What it changes on the machine, and undoes at down: docs/real-node.md.

Commands:
  up                 start a cluster and print its kubeconfig path
  down               stop every process of the cluster (and undo its real node), remove its state
  status             each component's health, and the real node's (exit 1 when any is unhealthy)
  kubeconfig         print the kubeconfig path again
  load-image ARCHIVE import an image archive (OCI or Docker) into every real node's containerd
  node VERB NAME     act on one node: drain (evictions honour PodDisruptionBudgets), cordon,
                     uncordon; on a node of --real-nodes N >= 2 also stop (kubelet, containerd
                     and its pods stopped), start, partition (cut off the network, processes
                     left running), heal

Flags:
  --dir DIR             state directory (default: ${defaultClusterDir()}); one cluster per dir
  --apiserver-port N    (up) serve the API on this port instead of a free one
  --nodes N             (up) number of kwok nodes, the first with one nvidia.com/gpu (default 3;
                        0 with --real-node, where kwok nodes are tainted ${kwokTaint.key}=${kwokTaint.value}:${kwokTaint.effect})
  --real-node           (up) add a real node (${realNodeDefaults.nodeName}, ${realNodeDefaults.nodeIp} on bridge ${realNodeDefaults.bridge})
  --real-nodes N        (up) N real nodes (1-${multiNodeDefaults.maxNodes}; 1 is --real-node): mlmodel-node-1..N, each in a
                        network namespace of its own (${multiNodeDefaults.nodeNetwork} on bridge ${multiNodeDefaults.hostBridge}, pods
                        ${multiNodeDefaults.clusterPodCidr}), zones ${multiNodeDefaults.zones.join(", ")}; StorageClasses
                        ${multiNodeDefaults.localStorageClass} (node-local) and ${multiNodeDefaults.sharedStorageClass} (ReadWriteMany)
  --image ARCHIVE       (up --real-node) import this image archive too; repeat for more
  --node-wait SECONDS   (up --real-node) wait this long for another cluster's real node to
                        stop (default 0: fail at once, naming that cluster's dir)
  --gateway-api         (up) also install the Gateway API CRDs (${gatewayApiVersion}, standard channel)
  --monitoring          (up) also start Prometheus with the chart's scrape jobs and alert rules
                        (built from its Go module on first use; see docs/monitoring.md)

Examples:
  mlmodel cluster up
  kubectl --kubeconfig "$(mlmodel cluster kubeconfig)" get nodes
  mlmodel cluster up --dir /tmp/c2 --apiserver-port 16443
  mlmodel cluster down --dir /tmp/c2
  sudo mlmodel cluster up --real-node --image ./mlserver.tar
  sudo mlmodel cluster up --real-nodes 3 && mlmodel cluster node partition mlmodel-node-2
  mlmodel cluster load-image ./my-image.tar`;

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
        monitoring: { type: "boolean" },
        "real-node": { type: "boolean" },
        "real-nodes": { type: "string" },
        image: { type: "string", multiple: true },
        "node-wait": { type: "string" },
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
        const realNodes = integerFlag("real-nodes", values["real-nodes"], 1, multiNodeDefaults.maxNodes);
        if (realNodes !== undefined && values["real-node"])
          throw new CliError(
            "give --real-node or --real-nodes N, not both (--real-node is --real-nodes 1)",
            2,
          );
        const realNode = values["real-node"] === true || realNodes !== undefined;
        if (!realNode && (values.image || values["node-wait"] !== undefined))
          throw new CliError("--image and --node-wait go with --real-node (kwok nodes run no images)", 2);
        const nodeWait = integerFlag("node-wait", values["node-wait"], 0, 86_400);
        const state = await up({
          dir,
          apiserverPort: integerFlag("apiserver-port", values["apiserver-port"], 1, 65535),
          nodes: integerFlag("nodes", values.nodes, realNode ? 0 : 1, 1000),
          gatewayApi: values["gateway-api"] === true,
          monitoring: values.monitoring === true,
          realNode,
          realNodes,
          images: values.image,
          nodeLockWaitMs: nodeWait === undefined ? undefined : nodeWait * 1000,
          progress: log,
        });
        console.error(`[cluster] Kubernetes ${state.kubernetesVersion} is up at ${state.server}`);
        if (state.realNode) {
          console.error(
            `[cluster] real node ${state.realNode.nodeName} at ${state.realNode.nodeIp} (pods: ${state.realNode.podCidr}); default StorageClass ${state.realNode.storageClass}`,
          );
          console.error(
            `[cluster] local images: ${state.realNode.images.pause.name}, ${state.realNode.images.busybox.name} (imagePullPolicy: IfNotPresent or Never)`,
          );
        }
        for (const node of state.realNodes?.nodes ?? [])
          console.error(
            `[cluster] real node ${node.name} at ${node.nodeIp} (pods: ${node.podCidr}, ${node.zone}); Ready in ${node.readySeconds.toFixed(1)}s`,
          );
        if (state.realNodes)
          console.error(
            `[cluster] this machine is ${state.realNodes.hostIp} to pods; StorageClasses ${state.realNodes.storageClasses.local} (default, node-local) and ${state.realNodes.storageClasses.shared} (ReadWriteMany)`,
          );
        const prometheus = values.monitoring ? await prometheusUrl(dir) : undefined;
        if (prometheus) console.error(`[cluster] prometheus: ${prometheus} (docs/monitoring.md)`);
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
        for (const leftover of result?.leftovers ?? [])
          console.error(`[cluster] could not undo: ${leftover}`);
        return result?.leftovers.length ? 1 : 0;
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
        if (result.prometheus) console.log(`  prometheus at ${result.prometheus} (docs/monitoring.md)`);
        const node = result.node;
        if (node) {
          const why = [node.reason, node.message].filter(Boolean).join(": ");
          console.log(
            `  node ${node.nodeName.padEnd(19)} ${node.kubeletVersion ?? ""} Ready=${node.ready}${why ? `  (${why})` : ""}`,
          );
        }
        for (const n of result.nodes ?? []) {
          const why = [n.reason, n.message].filter(Boolean).join(": ");
          console.log(
            `  node ${n.nodeName.padEnd(19)} ${n.members.nodeIp} ${n.members.zone} Ready=${n.ready}${n.members.linked ? "" : " PARTITIONED"}${why ? `  (${why})` : ""}`,
          );
          for (const c of n.members.components)
            console.log(
              `    ${c.component.padEnd(22)} pid ${String(c.pid).padEnd(8)} ${c.healthy ? "healthy" : "UNHEALTHY"}  ${c.running ? (c.url ?? "running") : "not running"}`,
            );
        }
        const nodeReady =
          (!node || node.ready === "True") &&
          (result.nodes ?? []).every(
            (n) => n.ready === "True" && n.members.components.every((c) => c.healthy),
          );
        return result.components.every((c) => c.healthy) && nodeReady ? 0 : 1;
      }
      case "load-image": {
        const archives = positionals.slice(1);
        if (archives.length === 0)
          throw new CliError("load-image needs an image archive: mlmodel cluster load-image ARCHIVE", 2);
        for (const archive of archives) {
          const names = await loadImage(dir, archive);
          console.error(`[cluster] imported ${archive}: ${names.join(", ") || "(no named image in it)"}`);
        }
        return 0;
      }
      case "node": {
        const [, verb, name] = positionals;
        if (!verb || !(nodeFaults as readonly string[]).includes(verb) || !name)
          throw new CliError(
            `usage: mlmodel cluster node ${nodeFaults.join("|")} NAME (got "${positionals.slice(1).join(" ")}")`,
            2,
          );
        await nodeFault(dir, verb as (typeof nodeFaults)[number], name, { progress: log });
        console.error(`[cluster] node ${verb} ${name}: done`);
        return 0;
      }
      case "kubeconfig": {
        if (!(await readState(dir)) || !existsSync(kubeconfigPath(dir))) {
          throw new CliError(`no cluster in ${dir}; start one with: mlmodel cluster up --dir ${dir}`);
        }
        console.log(kubeconfigPath(dir));
        return 0;
      }
      default:
        throw new CliError(
          `unknown cluster command "${action}"; expected up, down, status, kubeconfig, load-image or node`,
          2,
        );
    }
  } catch (err) {
    if (err instanceof ClusterError || err instanceof BinaryError || err instanceof NodeError)
      throw new CliError(err.message);
    throw err;
  }
}
