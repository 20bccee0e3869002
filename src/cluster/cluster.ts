/**
 * The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
 * kwok on 127.0.0.1, with its state (TLS material, kubeconfigs, etcd data, logs, pids) in one
 * directory. `up` is all-or-nothing: when any component fails, everything started so far is
 * stopped again and the error names the component and its log.
 */
import { spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { mkdir, open, readFile, rm, writeFile } from "node:fs/promises";
import https from "node:https";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { KubeConfig } from "@kubernetes/client-node";
import { type BinaryPaths, ensureBinaries, isAlive, type ProgressFn } from "./binaries.ts";
import {
  adminClient,
  createFakeNodes,
  grantKwok,
  waitForDefaultServiceAccount,
  waitForNodesReady,
} from "./bootstrap.ts";
import { ClusterError } from "./errors.ts";
import { installGatewayApiCrds } from "./gateway-api.ts";
import { renderKubeconfig } from "./kubeconfig.ts";
import { clusterNetwork } from "./network.ts";
import { kwokTaint, memberOf, multiNodeDefaults, realNodeDefaults } from "./node/config.ts";
import { DrainError, drainNode, setSchedulable } from "./node/drain.ts";
import {
  fleetHealth,
  healMember,
  importedEverywhere,
  importImageEverywhere,
  type MemberHealth,
  partitionMember,
  prepareFleet,
  type RealNodesInfo,
  startFleet,
  startMember,
  stopMember,
} from "./node/fleet.ts";
import { MachineLockError } from "./node/lock.ts";
import {
  importedImages,
  importImage,
  NodeError,
  type NodeHealth,
  nodeCondition,
  nodeHealthUrl,
  prepareNode,
  type RealNodeInfo,
  readFleetJournal,
  readJournal,
  startNode,
  teardownFleet,
  teardownNode,
  writeJournal,
} from "./node/node.ts";
import { ensureRealNodePrerequisites, PrerequisiteError } from "./node/prerequisites.ts";
import type { NodePorts } from "./node/render.ts";
import { kwokConfigFile, kwokStagesFile, rootOnlyProblem } from "./paths.ts";
import { generatePki, type RealNodeIdentity } from "./pki.ts";
import {
  ComponentError,
  isOurs,
  type ProcessRecord,
  probe,
  startAgain,
  startProcess,
  startSupervised,
  stopProcess,
  waitUntil,
} from "./process.ts";
import { prometheusReadyUrl, prometheusUrl, startPrometheus } from "./prometheus.ts";
import { isNodeComponent, recordOf, replaceRecord, restartEnvironment } from "./restart.ts";
import { type Component, type ControlPlaneComponent, versions } from "./versions.ts";

export { ClusterError };

export interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
  scheduler: number;
  kwok: number;
}

export interface ClusterState {
  version: 1;
  dir: string;
  kubeconfig: string;
  server: string;
  etcdEndpoint: string;
  ports: Ports;
  processes: ProcessRecord[];
  kubernetesVersion: string;
  startedAt: string;
  /** Present when the cluster has a real node (`up --real-node`). */
  realNode?: RealNodeInfo;
  /** Present when the cluster has several real nodes (`up --real-nodes N`, N >= 2). */
  realNodes?: RealNodesInfo;
}

export interface UpOptions {
  dir: string;
  /** Fixed API server port; a free one is picked when absent. */
  apiserverPort?: number;
  nodes?: number;
  progress?: ProgressFn;
  /**
   * Stop the cluster when this process exits, however it exits (SIGKILL included): a
   * detached watchdog (watchdog.ts) polls it. For test runs and benchmarks; `mlmodel cluster
   * up` leaves it unset, since that cluster is meant to outlive the command.
   */
  stopWhenGone?: number;
  /** Install the Gateway API's standard-channel CRDs (gateway-api.ts). */
  gatewayApi?: boolean;
  /**
   * Add a real node (kubelet, containerd, kube-proxy, a storage provisioner) beside kwok:
   * pods run for real. With it, `nodes` (kwok nodes) defaults to 0, and kwok nodes carry a
   * NoSchedule taint so that only pods that tolerate it land there. See docs/real-node.md.
   */
  realNode?: boolean;
  /**
   * How many real nodes (1 to 4): 1 is `realNode`; from 2, each node runs in a network
   * namespace of its own, with its own pod CIDR, zone and processes (node/fleet.ts).
   */
  realNodes?: number;
  /** Image archives to import into the real nodes' containerd (OCI or Docker archives). */
  images?: string[];
  /** How long to wait for another cluster's real node to let go of the machine (default 0). */
  nodeLockWaitMs?: number;
  /** Start Prometheus beside the control plane, with the chart's scrape jobs and alert rules (prometheus.ts). */
  monitoring?: boolean;
}

const stateFile = (dir: string) => join(dir, "state.json");
/**
 * The processes an `up` has started so far, written as it goes: if that `up` is killed before
 * it writes state.json, `down` still finds (and stops) them.
 */
const startedFile = (dir: string) => join(dir, "started.json");

async function readStarted(dir: string): Promise<ProcessRecord[]> {
  try {
    return JSON.parse(await readFile(startedFile(dir), "utf8")) as ProcessRecord[];
  } catch {
    return [];
  }
}
export const kubeconfigPath = (dir: string) => join(dir, "admin.kubeconfig");

export async function readState(dir: string): Promise<ClusterState | undefined> {
  try {
    return JSON.parse(await readFile(stateFile(resolve(dir)), "utf8")) as ClusterState;
  } catch {
    return undefined;
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolvePromise) => {
    const server = createServer();
    server.once("error", () => resolvePromise(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () =>
      server.close(() => resolvePromise(true)),
    );
  });
}

/**
 * A port for a component to listen on, chosen below the kernel's ephemeral range: a port the
 * kernel hands out (listen on 0) is one every outgoing connection on the machine may take
 * before the component binds it seconds later, and a busy test run opens thousands.
 */
async function freePort(): Promise<number> {
  const [ephemeralLow] = await ephemeralRange();
  const low = 10_000;
  if (ephemeralLow - low >= 1_000) {
    for (let tries = 0; tries < 50; tries++) {
      const port = low + Math.floor(Math.random() * (ephemeralLow - low));
      if (await portFree(port)) return port;
    }
  }
  return kernelChosenPort();
}

async function ephemeralRange(): Promise<[number, number]> {
  const text = await readFile("/proc/sys/net/ipv4/ip_local_port_range", "utf8").catch(() => "");
  const [low, high] = text.trim().split(/\s+/).map(Number);
  return low && high ? [low, high] : [32768, 60999];
}

function kernelChosenPort(): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen({ port: 0, host: "127.0.0.1" }, () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolvePromise(address.port) : reject()));
    });
  });
}

async function allocatePorts(apiserverPort?: number): Promise<Ports> {
  if (apiserverPort !== undefined) {
    if (!Number.isInteger(apiserverPort) || apiserverPort < 1 || apiserverPort > 65535) {
      throw new ClusterError(`--apiserver-port ${apiserverPort} is not a port number (1-65535)`);
    }
    if (!(await portFree(apiserverPort))) {
      throw new ClusterError(
        `port ${apiserverPort} on 127.0.0.1 is already in use; pick another --apiserver-port, or omit it to use a free port`,
      );
    }
  }
  const ports: number[] = [];
  while (ports.length < 6) {
    const port = await freePort();
    if (port !== apiserverPort && !ports.includes(port)) ports.push(port);
  }
  const [etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok] = ports as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return { etcdClient, etcdPeer, apiserver: apiserverPort ?? apiserver, controllerManager, scheduler, kwok };
}

/**
 * A real node's cluster dir holds what `up` and `down` act on as root (the node's journal, its
 * kubeconfigs and keys): refused unless only root can change it.
 */
async function requireRootOnlyDir(dir: string): Promise<void> {
  const problem = await rootOnlyProblem("the cluster directory", dir);
  if (problem) throw new ClusterError(`${problem}; a real node's cluster directory must be root's alone`);
}

/** Refuses a second `up` on a live cluster; clears what a dead one left behind. */
async function claimDir(dir: string, progress: ProgressFn, realNode: boolean): Promise<() => Promise<void>> {
  // Private from the start: it holds the cluster's keys.
  await mkdir(dir, { recursive: true, mode: 0o700 });
  if (realNode || (await readJournal(dir)) || (await readFleetJournal(dir))) await requireRootOnlyDir(dir);
  const lockPath = join(dir, "up.lock");
  let handle: Awaited<ReturnType<typeof open>>;
  try {
    handle = await open(lockPath, "wx");
  } catch {
    const holder = Number(await readFile(lockPath, "utf8").catch(() => "0"));
    if (holder && isAlive(holder)) {
      throw new ClusterError(
        `another \`mlmodel cluster up\` (pid ${holder}) is starting a cluster in ${dir}`,
      );
    }
    await rm(lockPath, { force: true });
    handle = await open(lockPath, "wx");
  }
  await handle.writeFile(String(process.pid));
  await handle.close();
  const release = () => rm(lockPath, { force: true });
  const previous = await readState(dir);
  const halfStarted = await readStarted(dir);
  if (previous || halfStarted.length > 0) {
    const alive = [];
    for (const record of previous?.processes ?? halfStarted)
      if (await isOurs(record)) alive.push(record.component);
    if (alive.length > 0) {
      await release();
      throw new ClusterError(
        previous
          ? `a cluster is already running in ${dir} (${previous.server}; ${alive.join(", ")} up).\n` +
              `  Use it (KUBECONFIG=${previous.kubeconfig}), or stop it first: mlmodel cluster down --dir ${dir}`
          : `an interrupted \`mlmodel cluster up\` left ${alive.join(", ")} running in ${dir}; stop them first: mlmodel cluster down --dir ${dir}`,
      );
    }
    progress(`clearing the state of a cluster that is no longer running in ${dir}`);
  }
  if (await readJournal(dir)) {
    // Unmount before anything is removed: the node's dir holds live mounts until then.
    progress(`undoing the real node a previous cluster left in ${dir}`);
    for (const problem of await teardownNode(dir)) progress(`left behind: ${problem}`);
  }
  if (await readFleetJournal(dir)) {
    progress(`undoing the real nodes a previous cluster left in ${dir}`);
    for (const problem of await teardownFleet(dir)) progress(`left behind: ${problem}`);
  }
  for (const stale of [
    "state.json",
    "started.json",
    "etcd",
    "pki",
    "logs",
    "admin.kubeconfig",
    "kubeconfigs",
    "node",
    "nodes",
  ]) {
    await rm(join(dir, stale), { recursive: true, force: true });
  }
  return release;
}

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
# Writes only, at Metadata level: enough to count who wrote what (tests prove zero-write
# steady states and single-leader writes from this log) at little cost.
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
`;

/**
 * What the API server needs for a real node: pods reach it at the node's address (the
 * `kubernetes` Service's endpoint), so it binds every address (node/network.ts admits only
 * loopback and the bridge) and advertises the node's; nodes are authorized as nodes
 * (Node,RBAC + NodeRestriction); it calls kubelets with a client certificate of its own, at
 * their InternalIP, and verifies their serving certificates against the cluster CA.
 */
function realNodeApiserverArgs(dir: string, nodeIp: string): Record<string, string> {
  const pki = (name: string) => join(dir, "pki", name);
  return {
    "--bind-address": "0.0.0.0",
    "--advertise-address": nodeIp,
    "--authorization-mode": "Node,RBAC",
    "--kubelet-client-certificate": pki("apiserver-kubelet-client.crt"),
    "--kubelet-client-key": pki("apiserver-kubelet-client.key"),
    "--kubelet-certificate-authority": pki("ca.crt"),
    "--kubelet-preferred-address-types": "InternalIP",
  };
}

/** Replaces `--flag=value` arguments (and appends the flags not there yet). */
function withFlags(args: string[], flags: Record<string, string>): string[] {
  const out = args.map((arg) => {
    const name = arg.split("=")[0]!;
    return name in flags ? `${name}=${flags[name]}` : arg;
  });
  for (const [name, value] of Object.entries(flags))
    if (!args.some((arg) => arg.startsWith(`${name}=`))) out.push(`${name}=${value}`);
  return out;
}

function componentArgs(
  dir: string,
  ports: Ports,
  realNode?: RealNodeIdentity,
): Record<ControlPlaneComponent, string[]> {
  const pki = (name: string) => join(dir, "pki", name);
  const kubeconfig = (name: string) => join(dir, "kubeconfigs", `${name}.kubeconfig`);
  const admissionPlugins = `NamespaceLifecycle,LimitRanger,ServiceAccount,PodSecurity,DefaultStorageClass,ResourceQuota,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy${realNode ? ",NodeRestriction" : ""}`;
  const apiserver = [
    `--etcd-servers=https://127.0.0.1:${ports.etcdClient}`,
    `--etcd-cafile=${pki("ca.crt")}`,
    `--etcd-certfile=${pki("apiserver-etcd-client.crt")}`,
    `--etcd-keyfile=${pki("apiserver-etcd-client.key")}`,
    "--bind-address=127.0.0.1",
    "--advertise-address=127.0.0.1",
    `--secure-port=${ports.apiserver}`,
    `--tls-cert-file=${pki("apiserver.crt")}`,
    `--tls-private-key-file=${pki("apiserver.key")}`,
    `--client-ca-file=${pki("ca.crt")}`,
    `--service-account-key-file=${pki("sa.pub")}`,
    `--service-account-signing-key-file=${pki("sa.key")}`,
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    `--service-cluster-ip-range=${clusterNetwork.serviceCidr}`,
    "--authorization-mode=RBAC",
    // As on real clusters: Pod Security admission, not this switch, decides what may run.
    "--allow-privileged=true",
    `--enable-admission-plugins=${admissionPlugins}`,
    `--audit-policy-file=${join(dir, "audit-policy.yaml")}`,
    `--audit-log-path=${join(dir, "logs", "audit.log")}`,
    "--audit-log-maxsize=200",
    "--audit-log-maxbackup=2",
    "--profiling=false",
    "--v=1",
  ];
  return {
    etcd: [
      "--name=mlmodel-local",
      `--data-dir=${join(dir, "etcd")}`,
      `--listen-client-urls=https://127.0.0.1:${ports.etcdClient}`,
      `--advertise-client-urls=https://127.0.0.1:${ports.etcdClient}`,
      `--listen-peer-urls=https://127.0.0.1:${ports.etcdPeer}`,
      `--initial-advertise-peer-urls=https://127.0.0.1:${ports.etcdPeer}`,
      `--initial-cluster=mlmodel-local=https://127.0.0.1:${ports.etcdPeer}`,
      // Whoever writes to etcd runs pods as root on a real node: only the API server may.
      ...etcdTlsArgs(pki),
      // A throwaway test cluster: durability is not worth the fsync latency.
      "--unsafe-no-fsync",
      "--quota-backend-bytes=8589934592",
      "--log-level=warn",
    ],
    "kube-apiserver": realNode
      ? withFlags(apiserver, realNodeApiserverArgs(dir, realNode.nodeIp))
      : apiserver,
    "kube-controller-manager": [
      `--kubeconfig=${kubeconfig("kube-controller-manager")}`,
      `--authentication-kubeconfig=${kubeconfig("kube-controller-manager")}`,
      `--authorization-kubeconfig=${kubeconfig("kube-controller-manager")}`,
      "--bind-address=127.0.0.1",
      `--secure-port=${ports.controllerManager}`,
      `--cert-dir=${join(dir, "pki", "kube-controller-manager")}`,
      `--service-account-private-key-file=${pki("sa.key")}`,
      `--root-ca-file=${pki("ca.crt")}`,
      "--use-service-account-credentials=true",
      // Leader-elected as on real clusters, under a supervisor (supervise.ts): it exits when an
      // API server outage outlasts its renew deadline, and its fresh start forgets the node
      // leases it could not see renewed meanwhile.
      "--leader-elect=true",
      "--controllers=*",
      // Faster than the defaults, so a test sees garbage collection and node status promptly.
      "--concurrent-gc-syncs=20",
      // Each controller's client is rate-limited to 20 requests/s by default. The audit log of
      // a 1,000-model benchmark showed the Deployment and ReplicaSet controllers pinned at
      // exactly 20.1/s for minutes: that limit, not the operator nor the API server, set the
      // pace. Large real clusters raise it too; on loopback the CPU is the honest limit.
      "--kube-api-qps=500",
      "--kube-api-burst=1000",
      "--v=1",
    ],
    "kube-scheduler": [
      `--kubeconfig=${kubeconfig("kube-scheduler")}`,
      `--authentication-kubeconfig=${kubeconfig("kube-scheduler")}`,
      `--authorization-kubeconfig=${kubeconfig("kube-scheduler")}`,
      "--bind-address=127.0.0.1",
      `--secure-port=${ports.scheduler}`,
      "--leader-elect=false",
      // Same reason as the controller manager's (default 50/s): binding pods must not be the
      // limit. Deprecated flags, but honoured without a --config file.
      "--kube-api-qps=500",
      "--kube-api-burst=1000",
      "--v=1",
    ],
    kwok: [
      `--kubeconfig=${kubeconfig("kwok")}`,
      `--config=${kwokConfigFile}`,
      `--config=${kwokStagesFile}`,
      "--manage-all-nodes=false",
      "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
      `--server-address=127.0.0.1:${ports.kwok}`,
      // Node leases keep the node-lifecycle controller from tainting our fake nodes.
      "--node-lease-duration-seconds=40",
      `--cidr=${clusterNetwork.kwokPodCidr}`,
      `--node-ip=${clusterNetwork.kwokNodeIp}`,
    ],
  };
}

/**
 * etcd over TLS on both ports, admitting only client certificates of etcd's own CA, which
 * signed the API server's and no other (pki.ts), so that a local user cannot read Secrets
 * from etcd or write a privileged pod into it.
 */
function etcdTlsArgs(pki: (name: string) => string): string[] {
  return [
    `--cert-file=${pki("etcd.crt")}`,
    `--key-file=${pki("etcd.key")}`,
    `--trusted-ca-file=${pki("etcd-ca.crt")}`,
    "--client-cert-auth=true",
    `--peer-cert-file=${pki("etcd.crt")}`,
    `--peer-key-file=${pki("etcd.key")}`,
    `--peer-trusted-ca-file=${pki("etcd-ca.crt")}`,
    "--peer-client-cert-auth=true",
  ];
}

/** The TLS material a client of etcd presents: the API server's, the one client etcd admits. */
export async function etcdClientTls(dir: string): Promise<{ ca: string; cert: string; key: string }> {
  const read = (name: string) => readFile(join(dir, "pki", name), "utf8");
  return {
    ca: await read("ca.crt"),
    cert: await read("apiserver-etcd-client.crt"),
    key: await read("apiserver-etcd-client.key"),
  };
}

/** One POST to etcd's JSON gateway (e.g. /v3/kv/range) as the API server's client. */
async function etcdPost(dir: string, endpoint: string, path: string, body: unknown): Promise<unknown> {
  const tls = await etcdClientTls(dir);
  return new Promise((resolvePromise, reject) => {
    const request = https.request(
      new URL(path, endpoint),
      { method: "POST", ...tls, timeout: 10_000, headers: { "content-type": "application/json" } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () =>
          res.statusCode === 200
            ? resolvePromise(JSON.parse(text))
            : reject(new ClusterError(`etcd ${path}: HTTP ${res.statusCode} ${text}`)),
        );
      },
    );
    request.on("error", (err) => reject(new ClusterError(`etcd ${path}: ${err.message}`)));
    request.on("timeout", () => request.destroy(new Error("no answer within 10 s")));
    request.end(JSON.stringify(body));
  });
}

/**
 * Compacts the etcd of the cluster in `dir` at its current revision, so that a watch or list
 * from an older resourceVersion gets 410 Gone (fault-injection tests). Returns the revision.
 */
export async function compactEtcd(dirOption: string): Promise<number> {
  const dir = resolve(dirOption);
  const state = await readState(dir);
  if (!state) throw new ClusterError(`no running cluster in ${dir}`);
  const range = (await etcdPost(dir, state.etcdEndpoint, "/v3/kv/range", { key: "AA==" })) as {
    header: { revision: string };
  };
  const revision = Number(range.header.revision);
  await etcdPost(dir, state.etcdEndpoint, "/v3/kv/compaction", {
    revision: String(revision),
    physical: true,
  });
  return revision;
}

const binaryOf: Record<ControlPlaneComponent, keyof BinaryPaths> = {
  etcd: "etcd",
  "kube-apiserver": "kube-apiserver",
  "kube-controller-manager": "kube-controller-manager",
  "kube-scheduler": "kube-scheduler",
  kwok: "kwok",
};

/** The components that run under a supervisor (supervise.ts), which starts them again when they exit. */
const supervisedComponents: readonly ControlPlaneComponent[] = ["kube-controller-manager"];

async function writeMaterial(dir: string, ports: Ports, realNode?: RealNodeIdentity): Promise<string> {
  const pki = await generatePki(realNode);
  const pkiDir = join(dir, "pki");
  await mkdir(join(pkiDir, "kube-controller-manager"), { recursive: true });
  await mkdir(join(dir, "kubeconfigs"), { recursive: true });
  await mkdir(join(dir, "logs"), { recursive: true });
  const files: Record<string, string> = {
    "ca.crt": pki.ca.certPem,
    "ca.key": pki.ca.keyPem,
    "apiserver.crt": pki.apiserver.certPem,
    "apiserver.key": pki.apiserver.keyPem,
    "sa.pub": pki.serviceAccount.publicKeyPem,
    "sa.key": pki.serviceAccount.privateKeyPem,
    "etcd-ca.crt": pki.etcd.ca,
    "etcd.crt": pki.etcd.server.certPem,
    "etcd.key": pki.etcd.server.keyPem,
    "apiserver-etcd-client.crt": pki.etcd.apiserverClient.certPem,
    "apiserver-etcd-client.key": pki.etcd.apiserverClient.keyPem,
  };
  if (pki.realNode) {
    files["kubelet.crt"] = pki.realNode.kubeletServing.certPem;
    files["kubelet.key"] = pki.realNode.kubeletServing.keyPem;
    files["apiserver-kubelet-client.crt"] = pki.realNode.apiserverKubeletClient.certPem;
    files["apiserver-kubelet-client.key"] = pki.realNode.apiserverKubeletClient.keyPem;
  }
  for (const [name, content] of Object.entries(files)) {
    await writeFile(join(pkiDir, name), content, { mode: name.endsWith(".key") ? 0o600 : 0o644 });
  }
  const server = `https://127.0.0.1:${ports.apiserver}`;
  for (const [identity, pair] of Object.entries(pki.clients)) {
    const content = renderKubeconfig({
      server,
      caPem: pki.ca.certPem,
      certPem: pair.certPem,
      keyPem: pair.keyPem,
      user: identity,
    });
    const path =
      identity === "admin" ? kubeconfigPath(dir) : join(dir, "kubeconfigs", `${identity}.kubeconfig`);
    await writeFile(path, content, { mode: 0o600 });
  }
  await writeFile(join(dir, "audit-policy.yaml"), auditPolicy);
  return server;
}

async function waitHealthy(
  record: ProcessRecord,
  url: string,
  tls: { ca?: string; cert?: string; key?: string },
  timeoutMs: number,
): Promise<void> {
  await waitUntil(record, "healthy", async () => (await probe({ url, ...tls })).code === 200, timeoutMs);
}

async function allocateNodePorts(): Promise<NodePorts> {
  const ports: number[] = [];
  while (ports.length < 5) {
    const port = await freePort();
    if (!ports.includes(port)) ports.push(port);
  }
  const [kubelet, kubeletHealthz, kubeProxyHealthz, kubeProxyMetrics, containerdMetrics] = ports as [
    number,
    number,
    number,
    number,
    number,
  ];
  return { kubelet, kubeletHealthz, kubeProxyHealthz, kubeProxyMetrics, containerdMetrics };
}

const writeState = (dir: string, state: ClusterState) =>
  writeFile(stateFile(dir), `${JSON.stringify(state, null, 2)}\n`);

/** How many times `up` starts over with new ports when a component finds its port taken. */
const portConflictAttempts = 3;

/** Starts a cluster in `options.dir`, or explains why it cannot. Returns its state. */
export async function up(options: UpOptions): Promise<ClusterState> {
  const dir = resolve(options.dir);
  const progress = options.progress ?? (() => {});
  const fleetSize = realNodeCount(options);
  const release = await claimDir(dir, progress, fleetSize > 0);
  // Several nodes reach the API server at the host's address on their network: the identity
  // its certificate and advertised address name.
  const realNode: RealNodeIdentity | undefined =
    fleetSize >= 2
      ? { nodeName: memberOf(1).name, nodeIp: multiNodeDefaults.hostIp }
      : fleetSize === 1
        ? { nodeName: realNodeDefaults.nodeName, nodeIp: realNodeDefaults.nodeIp }
        : undefined;
  try {
    for (let attempt = 1; ; attempt++) {
      const started: ProcessRecord[] = [];
      try {
        return await startCluster(dir, options, realNode, started, progress);
      } catch (err) {
        const undo = fleetSize >= 2 ? teardownFleet : realNode ? teardownNode : undefined;
        const left = undo ? await undo(dir).catch((e: Error) => [e.message]) : [];
        for (const problem of left) progress(`undoing the failed start left this behind: ${problem}`);
        for (const record of started.reverse()) await stopProcess(record, 2000);
        // A port is free when chosen and bound seconds later: another process on a busy
        // machine can take it in between. Starting over with new ports is the only cure.
        if (err instanceof ComponentError && isPortConflict(err) && attempt < portConflictAttempts) {
          progress(`${err.component} found its port taken; starting over with new ports`);
          continue;
        }
        if (err instanceof ComponentError)
          throw new ClusterError(`the local control plane did not start: ${err.message}`);
        if (err instanceof MachineLockError || err instanceof NodeError || err instanceof PrerequisiteError)
          throw new ClusterError(err.message);
        throw err;
      }
    }
  } finally {
    await release();
  }
}

/** The number of real nodes `options` ask for (0: kwok only); a clear error when out of range. */
export function realNodeCount(options: Pick<UpOptions, "realNode" | "realNodes">): number {
  if (options.realNodes === undefined) return options.realNode ? 1 : 0;
  const n = options.realNodes;
  if (!Number.isInteger(n) || n < 1 || n > multiNodeDefaults.maxNodes)
    throw new ClusterError(
      `realNodes must be a whole number from 1 to ${multiNodeDefaults.maxNodes}, not ${n}`,
    );
  if (options.realNode === false)
    throw new ClusterError(`realNode: false contradicts realNodes: ${n}; give one of them`);
  return n;
}

const isPortConflict = (err: ComponentError) => /address already in use/.test(err.message);

async function startCluster(
  dir: string,
  options: UpOptions,
  realNode: RealNodeIdentity | undefined,
  started: ProcessRecord[],
  progress: ProgressFn,
): Promise<ClusterState> {
  const prerequisites = realNode ? await ensureRealNodePrerequisites(progress) : undefined;
  const paths = await ensureBinaries(progress);
  const t0 = Date.now();
  const ports = await allocatePorts(options.apiserverPort);
  const fleetSize = realNodeCount(options);
  if (fleetSize >= 2) {
    await prepareFleet({
      clusterDir: dir,
      count: fleetSize,
      apiserverPort: ports.apiserver,
      ports: await allocateNodePorts(),
      lockWaitMs: options.nodeLockWaitMs ?? realNodeDefaults.lockWaitMs,
      progress,
    });
  } else if (realNode) {
    await prepareNode({
      clusterDir: dir,
      apiserverPort: ports.apiserver,
      ports: await allocateNodePorts(),
      lockWaitMs: options.nodeLockWaitMs ?? realNodeDefaults.lockWaitMs,
      progress,
    });
  }
  const server = await writeMaterial(dir, ports, realNode);
  const args = componentArgs(dir, ports, realNode);
  const start = (component: ControlPlaneComponent) => {
    const launch = supervisedComponents.includes(component) ? startSupervised : startProcess;
    const record = launch(
      component,
      paths[binaryOf[component]],
      args[component],
      join(dir, "logs", `${component}.log`),
    );
    started.push(record);
    writeFileSync(startedFile(dir), JSON.stringify(started));
    return record;
  };
  const ca = await readFile(join(dir, "pki", "ca.crt"), "utf8");

  const etcd = start("etcd");
  const etcdTls = await etcdClientTls(dir);
  await waitUntil(
    etcd,
    "healthy",
    async () =>
      (await probe({ url: `https://127.0.0.1:${ports.etcdClient}/health`, ...etcdTls })).body.includes(
        '"health":"true"',
      ),
    30_000,
  );
  progress("etcd is up");

  const apiserver = start("kube-apiserver");
  await waitHealthy(apiserver, `${server}/readyz`, { ca }, 90_000);
  progress(`kube-apiserver is ready at ${server}`);
  await grantKwok(kubeconfigPath(dir));

  const controllerManager = start("kube-controller-manager");
  const scheduler = start("kube-scheduler");
  const kwok = start("kwok");
  await Promise.all([
    waitHealthy(controllerManager, `https://127.0.0.1:${ports.controllerManager}/healthz`, {}, 60_000),
    waitHealthy(scheduler, `https://127.0.0.1:${ports.scheduler}/healthz`, {}, 60_000),
    waitUntil(
      kwok,
      "healthy",
      async () => (await probe({ url: `http://127.0.0.1:${ports.kwok}/healthz` })).code === 200,
      60_000,
    ),
  ]);
  progress("kube-controller-manager, kube-scheduler and kwok are up");

  const client = adminClient(kubeconfigPath(dir));
  let nodeInfo: RealNodeInfo | undefined;
  let fleetInfo: RealNodesInfo | undefined;
  if (fleetSize >= 2 && prerequisites) {
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfigPath(dir));
    fleetInfo = await startFleet({
      clusterDir: dir,
      binaries: prerequisites.binaries,
      images: prerequisites.images,
      extraImages: (options.images ?? []).map((archive) => resolve(archive)),
      credentials: {
        caFile: join(dir, "pki", "ca.crt"),
        caKeyFile: join(dir, "pki", "ca.key"),
        kubeProxyKubeconfig: join(dir, "kubeconfigs", "kube-proxy.kubeconfig"),
        provisionerKubeconfig: join(dir, "kubeconfigs", "local-path-provisioner.kubeconfig"),
      },
      apiserverPort: ports.apiserver,
      kubeConfig: kc,
      logsDir: join(dir, "logs"),
      progress,
    });
  } else if (realNode && prerequisites) {
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfigPath(dir));
    const pki = (name: string) => join(dir, "pki", name);
    const kubeconfig = (name: string) => join(dir, "kubeconfigs", `${name}.kubeconfig`);
    nodeInfo = await startNode({
      clusterDir: dir,
      binaries: prerequisites.binaries,
      images: prerequisites.images,
      extraImages: (options.images ?? []).map((archive) => resolve(archive)),
      credentials: {
        caFile: pki("ca.crt"),
        kubeletCertFile: pki("kubelet.crt"),
        kubeletKeyFile: pki("kubelet.key"),
        kubeletKubeconfig: kubeconfig("kubelet"),
        kubeProxyKubeconfig: kubeconfig("kube-proxy"),
        provisionerKubeconfig: kubeconfig("local-path-provisioner"),
      },
      kubeConfig: kc,
      logsDir: join(dir, "logs"),
      started,
      progress,
    });
  }
  // Beside a real node, kwok nodes are opt-in and tainted: pods meant for kwok (images that
  // exist nowhere) never land on the real node, and real pods never land on a fake one.
  const nodes = await createFakeNodes(
    client,
    options.nodes ?? (realNode ? 0 : 3),
    realNode ? kwokTaint : undefined,
  );
  if (nodes.length > 0)
    await waitUntil(kwok, "making the fake nodes Ready", () => waitForNodesReady(client, nodes), 60_000);
  await waitUntil(
    controllerManager,
    "creating service accounts",
    () => waitForDefaultServiceAccount(client),
    60_000,
  );
  const nodeSummary = [
    nodeInfo ? `real node ${nodeInfo.nodeName} (${nodeInfo.nodeIp})` : undefined,
    fleetInfo ? `real nodes ${fleetInfo.nodes.map((n) => n.name).join(", ")}` : undefined,
    nodes.length > 0 || !(nodeInfo || fleetInfo)
      ? `${nodes.length} kwok nodes${nodes.length ? ` (${nodes.join(", ")})` : ""}`
      : undefined,
  ]
    .filter(Boolean)
    .join(" and ");
  progress(`${nodeSummary} Ready; control plane up in ${((Date.now() - t0) / 1000).toFixed(1)}s`);
  if (options.gatewayApi) await installGatewayApiCrds(kubeconfigPath(dir), progress);
  if (options.monitoring) started.push((await startPrometheus(dir, kubeconfigPath(dir), progress)).record);

  const state: ClusterState = {
    version: 1,
    dir,
    kubeconfig: kubeconfigPath(dir),
    server,
    etcdEndpoint: `https://127.0.0.1:${ports.etcdClient}`,
    ports,
    processes: started,
    kubernetesVersion: versions.kubernetes,
    startedAt: new Date().toISOString(),
    ...(nodeInfo ? { realNode: nodeInfo } : {}),
    ...(fleetInfo ? { realNodes: fleetInfo } : {}),
  };
  await writeState(dir, state);
  await rm(startedFile(dir), { force: true });
  if (options.stopWhenGone !== undefined) startWatchdog(dir, options.stopWhenGone);
  return state;
}

function startWatchdog(dir: string, ownerPid: number): void {
  const script = fileURLToPath(new URL("./watchdog.ts", import.meta.url));
  const child = spawn(process.execPath, [script, dir, String(ownerPid)], { detached: true, stdio: "ignore" });
  child.unref();
}

export interface DownResult {
  stopped: Component[];
  /** What the real node's teardown could not undo (empty when it left nothing behind). */
  leftovers: string[];
}

/** Stops every process of the cluster in `dir` (and undoes its real node) and removes its state. */
export async function down(dirOption: string): Promise<DownResult | undefined> {
  const dir = resolve(dirOption);
  const state = await readState(dir);
  // No state but a node journal or started processes: an `up` killed half-way. Undone all the same.
  const journal = await readJournal(dir);
  const fleet = await readFleetJournal(dir);
  if (journal || fleet) await requireRootOnlyDir(dir);
  const processes = state?.processes ?? (await readStarted(dir));
  if (!state && !journal && !fleet && processes.length === 0) {
    if (existsSync(dir)) await rm(dir, { recursive: true, force: true });
    return undefined;
  }
  const stopped: Component[] = [];
  const alive = async (records: ProcessRecord[]) => {
    const out: ProcessRecord[] = [];
    for (const record of records) if (await isOurs(record)) out.push(record);
    return out;
  };
  const leftovers: string[] = [];
  if (journal) {
    const running = await alive(journal.processes);
    leftovers.push(...(await teardownNode(dir)));
    stopped.push(...running.map((r) => r.component));
  }
  if (fleet) {
    const running = await alive([...fleet.processes, ...fleet.members.flatMap((m) => m.processes)]);
    leftovers.push(...(await teardownFleet(dir)));
    stopped.push(...running.map((r) => r.component));
  }
  // Reverse start order: clients before the API server, the API server before etcd.
  for (const record of [...processes].reverse()) {
    if (await isOurs(record)) {
      await stopProcess(record);
      stopped.push(record.component);
    }
  }
  await rm(dir, { recursive: true, force: true });
  return { stopped, leftovers };
}

export interface ComponentHealth {
  component: Component;
  pid: number;
  running: boolean;
  healthy: boolean;
  detail: string;
}

function controlPlaneHealthUrl(state: ClusterState, component: ControlPlaneComponent): string {
  switch (component) {
    case "etcd":
      return `${state.etcdEndpoint}/health`;
    case "kube-apiserver":
      return `${state.server}/readyz`;
    case "kube-controller-manager":
      return `https://127.0.0.1:${state.ports.controllerManager}/healthz`;
    case "kube-scheduler":
      return `https://127.0.0.1:${state.ports.scheduler}/healthz`;
    case "kwok":
      return `http://127.0.0.1:${state.ports.kwok}/healthz`;
  }
}

/**
 * Where a component answers whether it is healthy: a node component's from the node's journal,
 * Prometheus's /-/ready under the URL `up --monitoring` recorded, the control plane's from the
 * state. Undefined for a component without one (the provisioner), or Prometheus's unrecorded URL.
 */
async function healthUrl(state: ClusterState, record: ProcessRecord): Promise<string | undefined> {
  if (record.component === "prometheus") {
    const base = await prometheusUrl(state.dir);
    return base ? prometheusReadyUrl(base) : undefined;
  }
  const journal = isNodeComponent(record.component) ? await readJournal(state.dir) : undefined;
  return journal && isNodeComponent(record.component)
    ? nodeHealthUrl(journal, record.component)
    : controlPlaneHealthUrl(state, record.component as ControlPlaneComponent);
}

/** What a component's process and health endpoint showed. */
export interface HealthObservation {
  running: boolean;
  /** The health endpoint asked; undefined when the component has none. */
  url?: string;
  /** Its answer (code 0: none); only asked while the process runs. */
  answer?: { code: number; body: string };
}

/** The components that always have a health endpoint: without its URL they cannot be judged. */
const needsHealthUrl: ReadonlySet<Component> = new Set(["prometheus"]);

/** A component's health from what was observed of it (pure: `status` observes, this judges). */
export function judgeHealth(
  record: Pick<ProcessRecord, "component" | "pid" | "log">,
  seen: HealthObservation,
): ComponentHealth {
  const { component, pid } = record;
  if (!seen.running)
    return { component, pid, running: false, healthy: false, detail: `not running (log: ${record.log})` };
  if (!seen.url) {
    return needsHealthUrl.has(component)
      ? {
          component,
          pid,
          running: true,
          healthy: false,
          detail: `unknown: its URL is not recorded (log: ${record.log})`,
        }
      : // A component without a health endpoint (the provisioner) is healthy while it runs.
        { component, pid, running: true, healthy: true, detail: "running" };
  }
  const code = seen.answer?.code ?? 0;
  const healthy =
    code === 200 && (component !== "etcd" || (seen.answer?.body ?? "").includes('"health":"true"'));
  return {
    component,
    pid,
    running: true,
    healthy,
    detail: healthy ? seen.url : `unhealthy: HTTP ${code || "no answer"} from ${seen.url}`,
  };
}

async function checkHealth(state: ClusterState, record: ProcessRecord): Promise<ComponentHealth> {
  const url = await healthUrl(state, record);
  const running = await isOurs(record);
  const tls =
    record.component === "etcd"
      ? await etcdClientTls(state.dir).catch(() => ({}))
      : record.component === "kube-apiserver"
        ? { ca: await readFile(join(state.dir, "pki", "ca.crt"), "utf8").catch(() => undefined) }
        : {};
  const answer = running && url ? await probe({ url, ...tls }) : undefined;
  return judgeHealth(record, { running, ...(url ? { url } : {}), ...(answer ? { answer } : {}) });
}

/** Health of each component of the cluster in `dir` (and of its real node), or undefined when there is none. */
export async function status(dirOption: string): Promise<
  | {
      state: ClusterState;
      components: ComponentHealth[];
      node?: NodeHealth;
      /** With several real nodes: each one's Node condition, processes and link. */
      nodes?: (NodeHealth & { members: MemberHealth })[];
      /** With `--monitoring`: the base URL of Prometheus's HTTP API. */
      prometheus?: string;
    }
  | undefined
> {
  const state = await readState(resolve(dirOption));
  if (!state) return undefined;
  const components = await Promise.all(state.processes.map((record) => checkHealth(state, record)));
  let node: NodeHealth | undefined;
  if (state.realNode) {
    const kc = new KubeConfig();
    kc.loadFromFile(state.kubeconfig);
    node = await nodeConditionOrUnknown(kc, state.realNode.nodeName);
  }
  const nodes = state.realNodes ? await fleetStatus(state) : undefined;
  const prometheus = state.processes.some((p) => p.component === "prometheus")
    ? await prometheusUrl(state.dir)
    : undefined;
  return {
    state,
    components,
    ...(node ? { node } : {}),
    ...(nodes ? { nodes } : {}),
    ...(prometheus ? { prometheus } : {}),
  };
}

/** A Node's condition, or Unknown with the reason when the API server does not answer. */
const nodeConditionOrUnknown = (kc: KubeConfig, nodeName: string): Promise<NodeHealth> =>
  nodeCondition(kc, nodeName).catch((err: Error) => ({
    nodeName,
    ready: "Unknown",
    reason: "APIUnreachable",
    message: err.message,
  }));

async function fleetStatus(state: ClusterState): Promise<(NodeHealth & { members: MemberHealth })[]> {
  const kc = new KubeConfig();
  kc.loadFromFile(state.kubeconfig);
  const members = (await fleetHealth(state.dir)) ?? [];
  return Promise.all(
    members.map(async (member) => ({
      ...(await nodeConditionOrUnknown(kc, member.name)),
      members: member,
    })),
  );
}

/** Imports an image archive into the real node of the cluster in `dir`; returns the image names. */
export async function loadImage(dirOption: string, archive: string): Promise<string[]> {
  const dir = await realNodeDir(dirOption);
  if ((await readState(dir))?.realNodes) return importImageEverywhere(dir, resolve(archive));
  return importImage(dir, resolve(archive));
}

/**
 * Imports `image` into the real node of the cluster in `dir` unless the node holds that very
 * build (same name and manifest digest); an image rebuilt under the same name is imported
 * again. Returns whether it imported.
 */
export async function loadImageIfChanged(
  dirOption: string,
  image: { ref: string; archive: string; digest: string },
): Promise<boolean> {
  const dir = await realNodeDir(dirOption);
  const several = (await readState(dir))?.realNodes !== undefined;
  const imported = several ? await importedEverywhere(dir) : await importedImages(dir);
  if (imported.get(image.ref) === image.digest) return false;
  await (several ? importImageEverywhere : importImage)(dir, resolve(image.archive));
  return true;
}

async function realNodeDir(dirOption: string): Promise<string> {
  const dir = resolve(dirOption);
  const state = await readState(dir);
  if (!state)
    throw new ClusterError(
      `no cluster in ${dir}; start one with: mlmodel cluster up --real-node --dir ${dir}`,
    );
  if (!state.realNode && !state.realNodes)
    throw new ClusterError(
      `the cluster in ${dir} has no real node (kwok nodes run no images); start one with --real-node`,
    );
  return dir;
}

/**
 * Stops one component of a running cluster and starts it again with the same arguments (same
 * ports, same data, the environment `up` gave it), after `downtimeMs`. For fault-injection
 * tests: an API server outage, an etcd restart, a real node's kubelet, containerd or kube-proxy
 * restarted under its pods. A real node's component is replaced in the node's journal too, so
 * that teardown stops the new process. Resolves once the component is healthy again.
 */
export async function restartComponent(
  dirOption: string,
  component: Component,
  options: { downtimeMs?: number; timeoutMs?: number } = {},
): Promise<ProcessRecord> {
  const dir = resolve(dirOption);
  const state = await readState(dir);
  if (!state) throw new ClusterError(`no running cluster in ${dir}`);
  const onNode = isNodeComponent(component);
  const journal = onNode ? await readJournal(dir) : undefined;
  if (onNode && !journal)
    throw new ClusterError(
      `${component} runs on a real node, and the cluster in ${dir} has no single real node (no node journal)`,
    );
  let old: ProcessRecord;
  try {
    old = recordOf(state.processes, component, `the cluster state in ${dir}`);
    if (journal) recordOf(journal.processes, component, `the node journal in ${dir}`);
  } catch (err) {
    throw new ClusterError((err as Error).message);
  }
  await stopProcess(old);
  if (options.downtimeMs) await new Promise((r) => setTimeout(r, options.downtimeMs));
  const record = startAgain(old, restartEnvironment(component, process.env));
  state.processes = replaceRecord(state.processes, old, record);
  await writeState(dir, state);
  if (journal) {
    journal.processes = replaceRecord(journal.processes, old, record);
    await writeJournal(dir, journal);
  }
  await waitUntil(
    record,
    "healthy again",
    async () => (await checkHealth(state, record)).healthy,
    options.timeoutMs ?? 90_000,
  );
  return record;
}

/** What `mlmodel cluster node VERB NAME` does to one node. */
export const nodeFaults = ["drain", "cordon", "uncordon", "stop", "start", "partition", "heal"] as const;
export type NodeFault = (typeof nodeFaults)[number];

/**
 * Acts on one node: `cordon`, `uncordon` and `drain` in the Kubernetes meaning (evictions honour
 * PodDisruptionBudgets; any node of any cluster); and, on a real node of a multi-node cluster,
 * `stop` (kubelet, kube-proxy, containerd and every container stopped: the node goes NotReady,
 * its pods are lost), `start` (back, until Ready), `partition` (the node cut off the network,
 * its processes left running), `heal` (joined again, until Ready).
 */
export async function nodeFault(
  dirOption: string,
  fault: NodeFault,
  name: string,
  options: { progress?: ProgressFn; drainTimeoutMs?: number } = {},
): Promise<void> {
  const dir = resolve(dirOption);
  const state = await readState(dir);
  if (!state) throw new ClusterError(`no cluster in ${dir}; start one with: mlmodel cluster up --dir ${dir}`);
  const kc = new KubeConfig();
  kc.loadFromFile(state.kubeconfig);
  if (fault === "cordon" || fault === "uncordon") return setSchedulable(kc, name, fault === "uncordon");
  if (fault === "drain") {
    await drainNode(kc, name, { progress: options.progress, timeoutMs: options.drainTimeoutMs }).catch(
      (err: Error) => {
        throw err instanceof DrainError ? new ClusterError(err.message) : err;
      },
    );
    return;
  }
  if (!state.realNodes)
    throw new ClusterError(
      `node ${fault} acts on a real node of a multi-node cluster, and the cluster in ${dir} has none; start one with: mlmodel cluster up --real-nodes 3 --dir ${dir}`,
    );
  try {
    switch (fault) {
      case "stop":
        return await stopMember(dir, name);
      case "start":
        return await startMember(dir, name, { kubeConfig: kc, logsDir: join(dir, "logs") });
      case "partition":
        return await partitionMember(dir, name);
      case "heal":
        return await healMember(dir, name, kc);
    }
  } catch (err) {
    if (err instanceof NodeError || err instanceof ComponentError) throw new ClusterError(err.message);
    throw err;
  }
}
