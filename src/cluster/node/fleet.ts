/**
 * Several real nodes on one machine (`up --real-nodes N`, N >= 2). Each node is a world of its
 * own: a network namespace (reached from the host over a veth pair on our bridge, with its own
 * address and pod CIDR), root directories of its own for containerd, kubelet and CNI state, a
 * cgroup root of its own, and its own containerd, kubelet and kube-proxy (run in the namespace
 * with nsenter, in the host's mount namespace so that kubelet's mounts are containerd's). One
 * storage provisioner on the host serves a node-local class and a shared one.
 *
 * As for the one node (node.ts), `prepareFleet` runs before the API server starts (lock,
 * journal, network, guard), `startFleet` once it is ready; `teardownFleet` (in node.ts, beside the one node's) undoes both from
 * the journal alone. The fault verbs (stop, start, partition, heal) act on one node.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CoreV1Api, type KubeConfig, setHeaderOptions } from "@kubernetes/client-node";
import { parse, stringify } from "yaml";
import type { NodeBinaryPaths, ProgressFn } from "../binaries.ts";
import { createObjects } from "../bootstrap.ts";
import { isOurs, type ProcessRecord, probe, startProcess, stopProcess, waitUntil } from "../process.ts";
import type { NodeComponent } from "../versions.ts";
import { loadCa, memberCredentials } from "./certs.ts";
import {
  fleetPaths,
  type Member,
  memberOf,
  memberPathsAt,
  multiNodeDefaults,
  realNodeDefaults,
} from "./config.ts";
import { createCgroup, killAndWait, pidsInCgroup, run, unmountUnder } from "./host.ts";
import type { NodeImages } from "./images.ts";
import {
  createNodeNetwork,
  deleteBridge,
  installGuard,
  linkExists,
  memberLinkUp,
  setMemberLink,
} from "./network.ts";
import {
  claimMachine,
  ctrArgs,
  type FleetJournal,
  importedImagesIn,
  importImageInto,
  killShims,
  type MemberJournal,
  memberSocketOf,
  NodeError,
  readFleetJournal,
  readNode,
  readyCondition,
  recordMachine,
  writeNodeFiles,
} from "./node.ts";
import { multiNodeObjects } from "./objects.ts";
import {
  containerdEnvironment,
  fleetProvisionerConfig,
  kubeletArgs,
  kubeProxyArgs,
  type NodeLayout,
  type NodePorts,
  provisionerArgsFor,
  provisionerHelperPod,
} from "./render.ts";

/** Facts about a running fleet, kept in the cluster's state.json. */
export interface RealNodesInfo {
  nodes: { name: string; nodeIp: string; podCidr: string; zone: string; readySeconds: number }[];
  /** Where pods and nodes reach this machine (the API server, a file server of the tests). */
  hostIp: string;
  storageClasses: { local: string; shared: string };
  images: NodeImages;
}

async function writeFleetJournal(clusterDir: string, journal: FleetJournal): Promise<void> {
  await writeFile(fleetPaths(clusterDir).journal, `${JSON.stringify(journal, null, 2)}\n`);
}

export interface PrepareFleetOptions {
  clusterDir: string;
  count: number;
  apiserverPort: number;
  ports: NodePorts;
  lockWaitMs: number;
  progress: ProgressFn;
}

/** Before the API server starts: the machine lock, the journal, the node network, the guard rules. */
export async function prepareFleet(options: PrepareFleetOptions): Promise<void> {
  const { clusterDir, progress } = options;
  if (!Number.isInteger(options.count) || options.count < 2 || options.count > multiNodeDefaults.maxNodes)
    throw new NodeError(
      `realNodes ${options.count} is not a fleet size: a multi-node cluster has 2 to ${multiNodeDefaults.maxNodes} nodes`,
    );
  await claimMachine(clusterDir, { waitMs: options.lockWaitMs, progress });
  const paths = fleetPaths(clusterDir);
  const members: MemberJournal[] = [];
  for (let index = 1; index <= options.count; index++) {
    const member = paths.member(index);
    await mkdir(member.root, { recursive: true });
    await writeFile(member.netns, "");
    members.push({ ...memberOf(index), root: member.root, netns: member.netns, processes: [] });
  }
  // Root's: the volumes in it are directories the provisioner's helper makes (objects.ts).
  await mkdir(paths.shared, { recursive: true, mode: 0o755 });
  const journal: FleetJournal = {
    version: 1,
    hostBridge: multiNodeDefaults.hostBridge,
    hostIp: multiNodeDefaults.hostIp,
    ports: options.ports,
    ...(await recordMachine()),
    members,
    processes: [],
    startedAt: new Date().toISOString(),
  };
  await writeFleetJournal(clusterDir, journal);
  if (await linkExists(journal.hostBridge)) {
    progress(`removing a bridge ${journal.hostBridge} left behind by an earlier cluster`);
    await deleteBridge(journal.hostBridge);
  }
  await createNodeNetwork(journal.hostBridge, journal.hostIp, multiNodeDefaults.nodeNetwork, members);
  await installGuard({
    bridge: journal.hostBridge,
    podCidr: multiNodeDefaults.nodeNetwork,
    apiserverPort: options.apiserverPort,
    // Every kubelet listens in its node's namespace, not on this machine.
    kubeletPorts: [],
  });
  progress(
    `${members.length} node namespaces on bridge ${journal.hostBridge} (${members.map((m) => `${m.name} ${m.nodeIp}`).join(", ")})`,
  );
}

export interface FleetCredentials {
  caFile: string;
  caKeyFile: string;
  kubeProxyKubeconfig: string;
  provisionerKubeconfig: string;
}

export interface StartFleetOptions {
  clusterDir: string;
  binaries: NodeBinaryPaths;
  images: NodeImages;
  extraImages: string[];
  credentials: FleetCredentials;
  apiserverPort: number;
  /** The admin's: objects, Node readiness. */
  kubeConfig: KubeConfig;
  logsDir: string;
  progress: ProgressFn;
}

/** A kubeconfig that names another server (a node reaches the API server at the host's address). */
export function withServer(kubeconfig: string, server: string): string {
  const config = parse(kubeconfig) as { clusters: { cluster: { server: string } }[] };
  for (const cluster of config.clusters) cluster.cluster.server = server;
  return stringify(config);
}

/** The files a member's agents read, as the one node's (render.ts) with its own settings. */
export function memberLayout(
  journal: FleetJournal,
  member: MemberJournal,
  images: NodeImages,
  caFile: string,
): NodeLayout {
  const memberPaths = memberPathsAt(member.root);
  return {
    paths: memberPaths,
    ports: journal.ports,
    nodeName: member.name,
    nodeIp: member.nodeIp,
    podCidr: member.podCidr,
    bridge: realNodeDefaults.bridge,
    pauseImage: images.pause.name,
    helperImage: images.busybox.name,
    caFile,
    kubeletCertFile: join(memberPaths.pki, "kubelet.crt"),
    kubeletKeyFile: join(memberPaths.pki, "kubelet.key"),
    kubeletKubeconfig: join(memberPaths.pki, "kubelet.kubeconfig"),
    kubeProxyKubeconfig: join(member.root, "..", "kube-proxy.kubeconfig"),
    member: {
      podGateway: member.podGateway,
      clusterPodCidr: multiNodeDefaults.clusterPodCidr,
      nodeNetwork: multiNodeDefaults.nodeNetwork,
      cgroupRoot: member.cgroupRoot,
      labels: { "topology.kubernetes.io/zone": member.zone },
    },
  };
}

/** Starts `binary` inside the member's network namespace; the record names the binary nsenter runs. */
function startInMember<C extends NodeComponent>(
  member: MemberJournal,
  component: C,
  binary: string,
  args: string[],
  logsDir: string,
  env?: NodeJS.ProcessEnv,
): ProcessRecord<C> {
  const record = startProcess(
    component,
    "nsenter",
    [`--net=${member.netns}`, "--", binary, ...args],
    join(logsDir, member.name, `${component}.log`),
    env,
  );
  // nsenter execs the binary in the same process: its command line is the binary's.
  return { ...record, binary, args };
}

export function memberHealthUrl(
  journal: FleetJournal,
  member: Member,
  component: NodeComponent,
): string | undefined {
  switch (component) {
    case "containerd":
      return `http://${member.nodeIp}:${journal.ports.containerdMetrics}/v1/metrics`;
    case "kubelet":
      return `http://${member.nodeIp}:${journal.ports.kubeletHealthz}/healthz`;
    case "kube-proxy":
      return `http://${member.nodeIp}:${journal.ports.kubeProxyHealthz}/healthz`;
    case "local-path-provisioner":
      return undefined;
  }
}

interface MemberStart {
  journal: FleetJournal;
  member: MemberJournal;
  layout: NodeLayout;
  binaries: NodeBinaryPaths;
  core: CoreV1Api;
  logsDir: string;
  /** Image archives to import when containerd is up (none when it restarts with its images). */
  archives: string[];
  save: () => Promise<void>;
}

/** Starts a member's containerd, kubelet (until its Node is Ready) and kube-proxy; returns seconds to Ready. */
async function startMemberProcesses(start: MemberStart): Promise<number> {
  const { member, layout, journal } = start;
  await mkdir(join(start.logsDir, member.name), { recursive: true });
  const launch = async (
    component: NodeComponent,
    binary: string,
    args: string[],
    env?: NodeJS.ProcessEnv,
  ) => {
    const record = startInMember(member, component, binary, args, start.logsDir, env);
    member.processes = [...member.processes.filter((p) => p.component !== component), record];
    await start.save();
    return record;
  };
  const untilHealthy = (record: ProcessRecord<NodeComponent>) =>
    waitUntil(
      record,
      "healthy",
      async () =>
        (await probe({ url: memberHealthUrl(journal, member, record.component) ?? "" })).code === 200,
      60_000,
    );
  const socket = layout.paths.containerdSocket;
  const containerd = await launch(
    "containerd",
    "containerd",
    ["--config", layout.paths.containerdConfig],
    containerdEnvironment(process.env),
  );
  await waitUntil(
    containerd,
    "serving",
    async () => (await run("ctr", [...ctrArgs(socket), "version"], { timeoutMs: 5000 })).code === 0,
    60_000,
  );
  for (const archive of start.archives) await importImageInto(socket, archive, `as ${member.name}`);
  // kubelet refuses a cgroupRoot that does not exist in every hierarchy.
  await createCgroup(member.cgroupRoot);
  const kubeletStarted = Date.now();
  const kubelet = await launch("kubelet", start.binaries.kubelet, kubeletArgs(layout));
  await untilHealthy(kubelet);
  await untilReady(start.core, member.name, kubelet);
  const readySeconds = (Date.now() - kubeletStarted) / 1000;
  // The pod CIDR `up` gave the node, on its Node as the controller manager would set it (once).
  if (!(await readNode(start.core, member.name))?.spec?.podCIDR)
    await start.core.patchNode(
      { name: member.name, body: { spec: { podCIDR: member.podCidr, podCIDRs: [member.podCidr] } } },
      setHeaderOptions("Content-Type", "application/merge-patch+json"),
    );
  await untilHealthy(await launch("kube-proxy", start.binaries["kube-proxy"], kubeProxyArgs(layout)));
  return readySeconds;
}

async function untilReady(core: CoreV1Api, name: string, kubelet: ProcessRecord, timeoutMs = 120_000) {
  await waitUntil(
    kubelet,
    `registering node ${name} as Ready`,
    async () => readyCondition(await readNode(core, name))?.status === "True",
    timeoutMs,
  );
}

/** Starts every node (in parallel: most of a node's start is waiting) and the provisioner. */
export async function startFleet(options: StartFleetOptions): Promise<RealNodesInfo> {
  const { clusterDir, progress } = options;
  const journal = await readFleetJournal(clusterDir);
  if (!journal) throw new NodeError(`no fleet journal in ${clusterDir}: prepareFleet did not run`);
  const paths = fleetPaths(clusterDir);
  const server = `https://${journal.hostIp}:${options.apiserverPort}`;
  const ca = await loadCa(options.credentials.caFile, options.credentials.caKeyFile);
  await writeFile(
    join(paths.root, "kube-proxy.kubeconfig"),
    withServer(await readFile(options.credentials.kubeProxyKubeconfig, "utf8"), server),
    { mode: 0o600 },
  );
  await createObjects(options.kubeConfig, multiNodeObjects());
  const core = options.kubeConfig.makeApiClient(CoreV1Api);
  journal.binaries = options.binaries;
  // One journal write at a time: members start in parallel.
  let saving = Promise.resolve();
  const save = () => {
    saving = saving.then(() => writeFleetJournal(clusterDir, journal));
    return saving;
  };
  const archives = [options.images.pause.archive, options.images.busybox.archive, ...options.extraImages];
  const readySeconds = await Promise.all(
    journal.members.map(async (member) => {
      const layout = memberLayout(journal, member, options.images, options.credentials.caFile);
      await mkdir(memberPathsAt(member.root).pki, { recursive: true });
      const credentials = await memberCredentials(ca, member, server);
      await writeFile(layout.kubeletCertFile, credentials.kubeletServing.certPem);
      await writeFile(layout.kubeletKeyFile, credentials.kubeletServing.keyPem, { mode: 0o600 });
      await writeFile(layout.kubeletKubeconfig, credentials.kubeletKubeconfig, { mode: 0o600 });
      await writeNodeFiles(layout);
      const seconds = await startMemberProcesses({
        journal,
        member,
        layout,
        binaries: options.binaries,
        core,
        logsDir: options.logsDir,
        archives,
        save,
      });
      progress(`node ${member.name} (${member.nodeIp}, ${member.zone}) Ready in ${seconds.toFixed(1)}s`);
      return seconds;
    }),
  );

  const volumesByNode = Object.fromEntries(
    journal.members.map((m) => [m.name, memberLayout(journal, m, options.images, "").paths.volumes]),
  );
  const provisionerFiles = {
    config: paths.provisionerConfig("local-path"),
    helperPod: join(paths.root, "local-path-helper-pod.yaml"),
  };
  await writeFile(provisionerFiles.config, fleetProvisionerConfig(volumesByNode, paths.shared));
  await writeFile(
    provisionerFiles.helperPod,
    provisionerHelperPod(memberLayout(journal, journal.members[0]!, options.images, "")),
  );
  const provisioner = startProcess(
    "local-path-provisioner",
    options.binaries["local-path-provisioner"],
    provisionerArgsFor(
      provisionerFiles,
      options.images.busybox.name,
      options.credentials.provisionerKubeconfig,
    ),
    join(options.logsDir, "local-path-provisioner.log"),
  );
  journal.processes.push(provisioner);
  await save();
  progress(
    `kube-proxy on every node; storage classes ${multiNodeDefaults.localStorageClass} (node-local, default) and ${multiNodeDefaults.sharedStorageClass} (ReadWriteMany)`,
  );
  return {
    nodes: journal.members.map((m, i) => ({
      name: m.name,
      nodeIp: m.nodeIp,
      podCidr: m.podCidr,
      zone: m.zone,
      readySeconds: readySeconds[i]!,
    })),
    hostIp: journal.hostIp,
    storageClasses: {
      local: multiNodeDefaults.localStorageClass,
      shared: multiNodeDefaults.sharedStorageClass,
    },
    images: options.images,
  };
}

// --- images --------------------------------------------------------------------------------

/** Imports an image archive into every node's containerd; returns the image names. */
export async function importImageEverywhere(clusterDir: string, archive: string): Promise<string[]> {
  const journal = await requireFleet(clusterDir);
  const names = await Promise.all(
    journal.members.map((m) => importImageInto(memberSocketOf(m), archive, `as ${m.name} in ${clusterDir}`)),
  );
  return names[0] ?? [];
}

/** The image digests the nodes hold in common, by name (an image is there when every node has that build). */
export async function importedEverywhere(clusterDir: string): Promise<Map<string, string>> {
  const journal = await requireFleet(clusterDir);
  const lists = await Promise.all(
    journal.members.map((m) => importedImagesIn(memberSocketOf(m), `as ${m.name} in ${clusterDir}`)),
  );
  const [first, ...rest] = lists;
  return new Map(
    [...(first ?? new Map())].filter(([ref, digest]) => rest.every((l) => l.get(ref) === digest)),
  );
}

async function requireFleet(clusterDir: string): Promise<FleetJournal> {
  const journal = await readFleetJournal(clusterDir);
  if (!journal)
    throw new NodeError(`no real nodes run in ${clusterDir} (no ${fleetPaths(clusterDir).journal})`);
  return journal;
}

// --- faults --------------------------------------------------------------------------------

function memberNamed(journal: FleetJournal, name: string): MemberJournal {
  const member = journal.members.find((m) => m.name === name);
  if (!member)
    throw new NodeError(
      `node "${name}" is not one of this cluster's real nodes (${journal.members.map((m) => m.name).join(", ")})`,
    );
  return member;
}

/**
 * Stops a node the way a machine that loses power does: kubelet and kube-proxy stop, every
 * container and the node's containerd die (its pods are lost); its Node goes NotReady once
 * the controller manager's grace period has passed.
 */
export async function stopMember(clusterDir: string, name: string): Promise<void> {
  const journal = await requireFleet(clusterDir);
  const member = memberNamed(journal, name);
  const agents = member.processes.filter((p) => p.component !== "containerd");
  await Promise.all(agents.map((record) => stopProcess(record, 3000)));
  await killAndWait(await pidsInCgroup(member.cgroupRoot));
  for (const record of member.processes.filter((p) => p.component === "containerd"))
    await stopProcess(record, 5000);
  await killShims([memberSocketOf(member)]);
  // The containers' rootfs and shm mounts die with them; kubelet's own root mount stays for its return.
  const layout = memberPathsAt(member.root);
  await unmountUnder([layout.containerdState, layout.containerdRoot]);
}

export interface StartMemberOptions {
  kubeConfig: KubeConfig;
  logsDir: string;
}

/** Starts a stopped node again (its configuration and images are kept); resolves once it is Ready. */
export async function startMember(
  clusterDir: string,
  name: string,
  options: StartMemberOptions,
): Promise<void> {
  const journal = await requireFleet(clusterDir);
  const member = memberNamed(journal, name);
  const running = [];
  for (const record of member.processes) if (await isOurs(record)) running.push(record.component);
  if (running.length > 0)
    throw new NodeError(`node ${name} is running (${running.join(", ")}); stop it first (node stop ${name})`);
  if (!journal.binaries)
    throw new NodeError(`the nodes of ${clusterDir} never started: nothing to start again`);
  const images = { pause: { name: "", archive: "" }, busybox: { name: "", archive: "" } };
  await startMemberProcesses({
    journal,
    member,
    layout: memberLayout(journal, member, images, ""),
    binaries: journal.binaries,
    core: options.kubeConfig.makeApiClient(CoreV1Api),
    logsDir: options.logsDir,
    archives: [],
    save: () => writeFleetJournal(clusterDir, journal),
  });
}

/** Cuts a node off the control plane, the other nodes and the host; its processes keep running. */
export async function partitionMember(clusterDir: string, name: string): Promise<void> {
  const member = memberNamed(await requireFleet(clusterDir), name);
  await setMemberLink(member.hostVeth, false);
}

/** Joins a partitioned node to the network again; resolves once its Node is Ready. */
export async function healMember(clusterDir: string, name: string, kubeConfig: KubeConfig): Promise<void> {
  const member = memberNamed(await requireFleet(clusterDir), name);
  await setMemberLink(member.hostVeth, true);
  const kubelet = member.processes.find((p) => p.component === "kubelet");
  if (kubelet && (await isOurs(kubelet)))
    await untilReady(kubeConfig.makeApiClient(CoreV1Api), name, kubelet);
}

export interface MemberHealth {
  name: string;
  nodeIp: string;
  zone: string;
  /** Whether the node's veth is up (false: partitioned). */
  linked: boolean;
  components: { component: NodeComponent; pid: number; running: boolean; healthy: boolean; url?: string }[];
}

/** Each node's processes and link, as the host sees them. */
export async function fleetHealth(clusterDir: string): Promise<MemberHealth[] | undefined> {
  const journal = await readFleetJournal(clusterDir);
  if (!journal) return undefined;
  return Promise.all(
    journal.members.map(async (member) => ({
      name: member.name,
      nodeIp: member.nodeIp,
      zone: member.zone,
      linked: await memberLinkUp(member.hostVeth),
      components: await Promise.all(
        member.processes.map(async (record) => {
          const component = record.component as NodeComponent;
          const running = await isOurs(record);
          const url = memberHealthUrl(journal, member, component);
          const healthy = running && (!url || (await probe({ url })).code === 200);
          return { component, pid: record.pid, running, healthy, url };
        }),
      ),
    })),
  );
}
