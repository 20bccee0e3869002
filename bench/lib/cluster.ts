/**
 * The control plane a benchmark runs against: a private local cluster started for the run
 * (default), or the cluster of a given kubeconfig. Either way it gets enough fake (kwok) node
 * capacity for the pods the run will create, and the audit log when one is reachable.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { fakeNode } from "../../src/cluster/bootstrap.ts";
import { down, up } from "../../src/cluster/index.ts";
import { builtinKinds, KubeClient, type KubeObject } from "../../src/runtime/index.ts";

export interface BenchCluster {
  kubeconfigPath: string;
  kubeConfig: KubeConfig;
  admin: KubeClient;
  /** The API server's audit log of writes, when the cluster is a local one whose files we can read. */
  auditLog?: string;
  /** "private local cluster" or "kubeconfig PATH". */
  description: string;
  stop(): Promise<void>;
}

/** Pods a kwok node takes (see fakeNode). */
export const podsPerNode = 110;

export function nodesFor(pods: number): number {
  return Math.ceil(pods / podsPerNode) + 1;
}

export async function benchCluster(opts: {
  kubeconfig?: string;
  pods: number;
  /**
   * Exactly this many fake nodes, each taking its share of `pods` (and at least podsPerNode);
   * private control plane only. Default: as many 110-pod nodes as `pods` need, and one more.
   */
  nodes?: number;
  log: (line: string) => void;
}): Promise<BenchCluster> {
  if (opts.kubeconfig) {
    if (opts.nodes !== undefined)
      throw new Error(
        `--nodes ${opts.nodes} sets the fake nodes of the private control plane; with --kubeconfig the bench adds capacity to the cluster's own (drop --nodes or --kubeconfig)`,
      );
    return existingCluster(opts.kubeconfig, opts.pods, opts.log);
  }
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-bench-"));
  const nodes = opts.nodes ?? nodesFor(opts.pods);
  opts.log(`starting a private local control plane with ${nodes} fake nodes`);
  const state = await up({
    dir,
    nodes: opts.nodes === undefined ? nodes : 0,
    stopWhenGone: process.pid,
  });
  const kc = loadKubeConfig(state.kubeconfig);
  if (opts.nodes !== undefined) {
    const admin = KubeClient.fromKubeConfig(kc);
    for (let i = 0; i < opts.nodes; i++)
      await admin.create(builtinKinds.Node, sizedFakeNode(i, podsOnEach(opts.pods, opts.nodes)));
  }
  return {
    kubeconfigPath: state.kubeconfig,
    kubeConfig: kc,
    admin: KubeClient.fromKubeConfig(kc),
    auditLog: join(dir, "logs", "audit.log"),
    description: "private local control plane",
    async stop() {
      await down(dir);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function loadKubeConfig(path: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

/** The audit log of a local control plane: its directory holds admin.kubeconfig and logs/. */
function localAuditLog(kubeconfig: string): string | undefined {
  const candidates = [
    process.env.MLMODEL_TEST_CLUSTER_DIR && join(process.env.MLMODEL_TEST_CLUSTER_DIR, "logs", "audit.log"),
    join(dirname(kubeconfig), "logs", "audit.log"),
  ];
  return candidates.find((p): p is string => Boolean(p && existsSync(p)));
}

async function existingCluster(
  path: string,
  pods: number,
  log: (line: string) => void,
): Promise<BenchCluster> {
  const kc = loadKubeConfig(path);
  const admin = KubeClient.fromKubeConfig(kc);
  const added = await addNodeCapacity(admin, pods, log);
  return {
    kubeconfigPath: path,
    kubeConfig: kc,
    admin,
    auditLog: localAuditLog(path),
    description: `the cluster of kubeconfig ${path}`,
    async stop() {
      for (const name of added) await admin.delete(builtinKinds.Node, { name }).catch(() => {});
    },
  };
}

/** Adds kwok nodes until the fake nodes can hold `pods` more pods; returns the names added. */
async function addNodeCapacity(
  admin: KubeClient,
  pods: number,
  log: (line: string) => void,
): Promise<string[]> {
  const nodes = (await admin.list<KubeObject>(builtinKinds.Node)).items.filter(
    (n) => n.metadata.annotations?.["kwok.x-k8s.io/node"] === "fake",
  );
  const missing = nodesFor(pods) - nodes.length;
  const added: string[] = [];
  for (let i = 0; i < missing; i++) {
    const node = fakeNode(1000 + i);
    const name = `bench-kwok-node-${i}`;
    node.metadata = {
      ...node.metadata,
      name,
      labels: { ...node.metadata?.labels, "kubernetes.io/hostname": name },
    };
    await admin.create(builtinKinds.Node, node as KubeObject);
    added.push(name);
  }
  if (added.length) log(`added ${added.length} fake nodes for ${pods} pods`);
  return added;
}

/** Pods each of `nodes` nodes must take for `pods` in all, with a tenth to spare (and at least podsPerNode). */
export function podsOnEach(pods: number, nodes: number): number {
  const share = Math.ceil(pods / nodes);
  return Math.max(podsPerNode, share + Math.ceil(share / 10));
}

/** Fake node i (as `mlmodel cluster up` makes it) taking `pods` pods. */
function sizedFakeNode(index: number, pods: number): KubeObject {
  const node = fakeNode(index);
  const capacity = { ...node.status!.capacity, pods: String(pods) };
  return { ...node, status: { ...node.status, capacity, allocatable: capacity } } as unknown as KubeObject;
}

/** A TCP port free on loopback now (for the operator's metrics and probes). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}
