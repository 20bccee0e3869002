/**
 * The real node: containerd, kubelet, kube-proxy and the storage provisioner joined to the
 * local control plane, and the undoing of everything they did to the machine.
 *
 * Start-up has two halves around the control plane's own start (cluster.ts):
 * - `prepareNode` (before the API server starts): takes the machine's real-node lock, records
 *   what the node will change (sysctls, fixed host paths, nf_tables tables) in a journal,
 *   creates the bridge and installs the guard rules;
 * - `startNode` (once the API server is ready): configuration files, containerd, images,
 *   API objects, kubelet (until its Node is Ready), kube-proxy, the provisioner.
 * `teardownNode` undoes both, from the journal alone, whatever state a start or a crash left:
 * it is what `down`, a failed `up` and the watchdog run.
 */
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, readlink, realpath, rm, rmdir, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { CoreV1Api, type KubeConfig, type V1Node } from "@kubernetes/client-node";
import type { NodeBinaryPaths, ProgressFn } from "../binaries.ts";
import { createObjects } from "../bootstrap.ts";
import { isOurs, type ProcessRecord, probe, startProcess, stopProcess, waitUntil } from "../process.ts";
import type { NodeComponent } from "../versions.ts";
import {
  cgroupRoot,
  cniNetworkName,
  fixedHostPaths,
  fleetPaths,
  kubeletHostPaths,
  type Member,
  machineLockPath,
  memberPathsAt,
  multiNodeDefaults,
  type NodePaths,
  nodePaths,
  realNodeDefaults,
  sharedHostDirs,
  touchedSysctls,
} from "./config.ts";
import {
  createCgroup,
  findProcesses,
  HostError,
  killAndWait,
  listMounts,
  pidsInCgroup,
  readSysctl,
  removeCgroup,
  run,
  unixSocketsOf,
  unmountUnder,
  writeSysctl,
} from "./host.ts";
import type { NodeImages } from "./images.ts";
import { checkedLink, checkedSysctls, netnsToRemove } from "./journal.ts";
import { acquireMachineLock, type LockRecord, readLock, releaseMachineLock, takerAlive } from "./lock.ts";
import {
  type ChainsBefore,
  createBridge,
  deleteBridge,
  installGuard,
  linkExists,
  nftTables,
  recordChains,
  removeNewEmptyNftTables,
  removeNodeChains,
} from "./network.ts";
import { realNodeObjects } from "./objects.ts";
import {
  cniConfig,
  containerdConfig,
  containerdEnvironment,
  kubeletArgs,
  kubeletConfig,
  kubeProxyArgs,
  kubeProxyConfig,
  type NodeLayout,
  type NodePorts,
  provisionerArgs,
  provisionerConfig,
  provisionerHelperPod,
} from "./render.ts";

export class NodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NodeError";
  }
}

/** What `up` recorded before changing the machine, and what it started: all `down` needs. */
export interface NodeJournal extends MachineRecord {
  version: 1;
  nodeName: string;
  nodeIp: string;
  podCidr: string;
  bridge: string;
  ports: NodePorts;
  processes: ProcessRecord[];
  startedAt: string;
}

/** Facts about a running real node, kept in the cluster's state.json. */
export interface RealNodeInfo {
  nodeName: string;
  nodeIp: string;
  podCidr: string;
  bridge: string;
  containerdSocket: string;
  storageClass: string;
  images: NodeImages;
  /** Seconds from kubelet's start to its Node being Ready. */
  readySeconds: number;
}

export async function readJournal(clusterDir: string): Promise<NodeJournal | undefined> {
  try {
    return JSON.parse(await readFile(nodePaths(clusterDir).journal, "utf8")) as NodeJournal;
  } catch {
    return undefined;
  }
}

export async function writeJournal(clusterDir: string, journal: NodeJournal): Promise<void> {
  await writeFile(nodePaths(clusterDir).journal, `${JSON.stringify(journal, null, 2)}\n`);
}

/** The processes a cluster dir's node or nodes run (from the one node's journal, or the fleet's). */
async function journalledProcesses(clusterDir: string): Promise<ProcessRecord[]> {
  const fleet = await readFleetJournal(clusterDir);
  return [
    ...((await readJournal(clusterDir))?.processes ?? []),
    ...(fleet?.processes ?? []),
    ...(fleet?.members.flatMap((m) => m.processes) ?? []),
  ];
}

/** A holder of the machine lock is alive while its `up` runs or any of its nodes' processes does. */
async function holderAlive(holder: LockRecord): Promise<boolean> {
  if (await takerAlive(holder)) return true;
  for (const record of await journalledProcesses(holder.dir)) if (await isOurs(record)) return true;
  return false;
}

/** Undoes what a dead holder of the machine left: its one node, or its several; returns what it could not. */
async function teardownHolder(dir: string): Promise<string[]> {
  if (existsSync(fleetPaths(dir).journal)) return teardownFleet(dir, { machineWide: true });
  return teardownNode(dir, { machineWide: true });
}

/** True when this dir may undo machine-wide changes: it holds the node, or nobody live does. */
export async function mayTouchMachine(clusterDir: string): Promise<boolean> {
  const holder = await readLock(machineLockPath);
  return !holder || holder.dir === clusterDir || !(await holderAlive(holder));
}

/** Takes the machine's real-node lock for `clusterDir`, cleaning up after a dead holder. */
export async function claimMachine(
  clusterDir: string,
  options: { waitMs: number; progress: ProgressFn; reserve?: boolean },
): Promise<void> {
  const { takenOver } = await acquireMachineLock({
    lockPath: machineLockPath,
    dir: clusterDir,
    isAlive: holderAlive,
    ...options,
  });
  if (takenOver) {
    options.progress(
      `taking over the real node from a cluster that is gone (${takenOver.dir}); cleaning up after it`,
    );
    for (const problem of await teardownHolder(takenOver.dir)) options.progress(`left behind: ${problem}`);
  }
}

/**
 * Reserves the machine's real node for `clusterDir` until this process ends or calls
 * releaseRealNode: `up` in that dir takes it, and `down` leaves it reserved. For callers that
 * run several real-node clusters in a row, or compare the machine before `up` and after `down`.
 */
export async function reserveRealNode(
  clusterDir: string,
  options: { waitMs?: number; progress?: ProgressFn } = {},
): Promise<void> {
  await claimMachine(resolve(clusterDir), {
    waitMs: options.waitMs ?? realNodeDefaults.lockWaitMs,
    progress: options.progress ?? (() => {}),
    reserve: true,
  });
}

export async function releaseRealNode(clusterDir: string): Promise<void> {
  await releaseMachineLock(machineLockPath, resolve(clusterDir), { reservation: true });
}

/** What the machine looks like before a node changes it: what `down` restores. */
export interface MachineRecord {
  /** Values before the node started (undefined: the sysctl does not exist here). */
  sysctls: Record<string, string | undefined>;
  /** Fixed host paths that existed before: `down` leaves them (and removes the others). */
  preexistingPaths: string[];
  /** nf_tables tables before (undefined: no nft here). */
  nftTablesBefore?: string[];
  /** KUBE-/CNI- chains before, per family: `down` leaves them. */
  chainsBefore?: ChainsBefore;
  /** Pod network namespaces (`cni-*` in /run/netns) before: `down` leaves them. */
  netnsBefore?: string[];
}

export async function recordMachine(): Promise<MachineRecord> {
  const sysctls: Record<string, string | undefined> = {};
  for (const name of touchedSysctls) sysctls[name] = await readSysctl(name);
  return {
    sysctls,
    preexistingPaths: fixedHostPaths.filter((path) => existsSync(path)),
    nftTablesBefore: await nftTables(),
    chainsBefore: await recordChains(),
    netnsBefore: (await Promise.all((await netnsDirs()).map((dir) => readdir(dir).catch(() => [])))).flat(),
  };
}

/** Where pod network namespaces live; /var/run is most often a link to /run: each directory once. */
async function netnsDirs(): Promise<string[]> {
  return [
    ...new Set(await Promise.all(["/run/netns", "/var/run/netns"].map((d) => realpath(d).catch(() => d)))),
  ];
}

export interface PrepareOptions {
  clusterDir: string;
  apiserverPort: number;
  ports: NodePorts;
  lockWaitMs: number;
  progress: ProgressFn;
}

/**
 * Before the API server starts: the machine lock, the journal, the bridge, the guard rules.
 * The API server then binds every address (the guard admits only loopback and the bridge).
 */
export async function prepareNode(options: PrepareOptions): Promise<void> {
  const { clusterDir, progress } = options;
  await claimMachine(clusterDir, { waitMs: options.lockWaitMs, progress });
  const paths = nodePaths(clusterDir);
  await mkdir(paths.root, { recursive: true });
  const journal: NodeJournal = {
    version: 1,
    nodeName: realNodeDefaults.nodeName,
    nodeIp: realNodeDefaults.nodeIp,
    podCidr: realNodeDefaults.podCidr,
    bridge: realNodeDefaults.bridge,
    ports: options.ports,
    ...(await recordMachine()),
    processes: [],
    startedAt: new Date().toISOString(),
  };
  await writeJournal(clusterDir, journal);
  if (await linkExists(journal.bridge)) {
    progress(`removing a bridge ${journal.bridge} left behind by an earlier node`);
    await deleteBridge(journal.bridge);
  }
  await createBridge(journal.bridge, journal.nodeIp, journal.podCidr);
  await installGuard({
    bridge: journal.bridge,
    podCidr: journal.podCidr,
    apiserverPort: options.apiserverPort,
    kubeletPorts: [journal.ports.kubelet],
  });
}

export interface NodeCredentials {
  caFile: string;
  kubeletCertFile: string;
  kubeletKeyFile: string;
  kubeletKubeconfig: string;
  kubeProxyKubeconfig: string;
  provisionerKubeconfig: string;
}

export interface StartNodeOptions {
  clusterDir: string;
  binaries: NodeBinaryPaths;
  images: NodeImages;
  /** More image archives to import (OCI or Docker archives, as `ctr images import` takes). */
  extraImages: string[];
  credentials: NodeCredentials;
  kubeConfig: KubeConfig;
  logsDir: string;
  /** Every process started is pushed here too (the cluster's state lists them all). */
  started: ProcessRecord[];
  progress: ProgressFn;
}

function layoutOf(
  journal: NodeJournal,
  paths: NodePaths,
  images: NodeImages,
  credentials: NodeCredentials,
): NodeLayout {
  return {
    paths,
    ports: journal.ports,
    nodeName: journal.nodeName,
    nodeIp: journal.nodeIp,
    podCidr: journal.podCidr,
    bridge: journal.bridge,
    pauseImage: images.pause.name,
    helperImage: images.busybox.name,
    caFile: credentials.caFile,
    kubeletCertFile: credentials.kubeletCertFile,
    kubeletKeyFile: credentials.kubeletKeyFile,
    kubeletKubeconfig: credentials.kubeletKubeconfig,
    kubeProxyKubeconfig: credentials.kubeProxyKubeconfig,
  };
}

export async function writeNodeFiles(layout: NodeLayout): Promise<void> {
  const p = layout.paths;
  for (const dir of [
    p.cniConfDir,
    p.cniIpamDir,
    p.kubeletRoot,
    p.kubeletCertDir,
    p.podLogs,
    p.volumes,
    p.runcRoot,
  ])
    await mkdir(dir, { recursive: true });
  await writeFile(p.containerdConfig, containerdConfig(layout));
  await writeFile(join(p.cniConfDir, "10-mlmodel.conflist"), cniConfig(layout));
  await writeFile(p.kubeletConfig, kubeletConfig(layout));
  await writeFile(p.kubeProxyConfig, kubeProxyConfig(layout));
  await writeFile(p.provisionerConfig, provisionerConfig(layout));
  await writeFile(p.provisionerHelperPod, provisionerHelperPod(layout));
  // Pods resolve nothing rather than ask the host's resolver: their own loopback answers no
  // query. (An empty file would not do: containerd then copies the host's /etc/resolv.conf.)
  await writeFile(p.resolvConf, resolvConf);
}

/** There is no cluster DNS: see docs/real-node.md. */
export const resolvConf = "nameserver 127.0.0.1\n";

export const ctrArgs = (socket: string) => ["--address", socket, "--namespace", "k8s.io"];

/** Imports an image archive into the node's containerd (the `k8s.io` namespace kubelet reads). */
export async function importImage(clusterDir: string, archive: string): Promise<string[]> {
  return importImageInto(nodePaths(clusterDir).containerdSocket, archive, `in ${clusterDir}`);
}

/** Imports an image archive into the containerd at `socket` (`where` names its node in errors). */
export async function importImageInto(socket: string, archive: string, where: string): Promise<string[]> {
  if (!existsSync(socket))
    throw new NodeError(`no real node runs ${where} (no containerd socket at ${socket})`);
  if (!existsSync(archive)) throw new NodeError(`image archive ${archive} does not exist`);
  const result = await run("ctr", [...ctrArgs(socket), "images", "import", archive]);
  if (result.code !== 0)
    throw new NodeError(
      `ctr images import ${archive} failed (exit ${result.code}): ${result.stderr.trim() || result.stdout.trim()}`,
    );
  // "unpacking mlmodel.local/busybox:1.35.0 (sha256:...)...done"
  return [...result.stdout.matchAll(/unpacking (\S+) \(/g)].map((m) => m[1]!);
}

/**
 * The manifest digest of each image the node's containerd holds, by name (what `ctr images ls`
 * shows). An image rebuilt under the same name has a new digest: compare digests, not names.
 */
export async function importedImages(clusterDir: string): Promise<Map<string, string>> {
  return importedImagesIn(nodePaths(clusterDir).containerdSocket, `in ${clusterDir}`);
}

export async function importedImagesIn(socket: string, where: string): Promise<Map<string, string>> {
  if (!existsSync(socket))
    throw new NodeError(`no real node runs ${where} (no containerd socket at ${socket})`);
  const result = await run("ctr", [...ctrArgs(socket), "images", "ls"]);
  if (result.code !== 0)
    throw new NodeError(
      `ctr images ls failed (exit ${result.code}): ${result.stderr.trim() || result.stdout.trim()}`,
    );
  return parseImageList(result.stdout);
}

/** `ctr images ls` output: a header, then REF TYPE DIGEST SIZE PLATFORMS LABELS per line. */
export function parseImageList(output: string): Map<string, string> {
  const images = new Map<string, string>();
  for (const line of output.split("\n").slice(1)) {
    const [ref, , digest] = line.trim().split(/\s+/);
    if (ref && digest?.startsWith("sha256:")) images.set(ref, digest);
  }
  return images;
}

export function readyCondition(node: V1Node | undefined) {
  return node?.status?.conditions?.find((c) => c.type === "Ready");
}

export async function readNode(core: CoreV1Api, name: string): Promise<V1Node | undefined> {
  try {
    return await core.readNode({ name });
  } catch {
    return undefined;
  }
}

/** Starts the node's processes, in order, each once the one before it is healthy. */
export async function startNode(options: StartNodeOptions): Promise<RealNodeInfo> {
  const { clusterDir, progress } = options;
  const journal = await readJournal(clusterDir);
  if (!journal) throw new NodeError(`no node journal in ${clusterDir}: prepareNode did not run`);
  const paths = nodePaths(clusterDir);
  const layout = layoutOf(journal, paths, options.images, options.credentials);
  await writeNodeFiles(layout);

  const start = async (component: NodeComponent, binary: string, args: string[], env?: NodeJS.ProcessEnv) => {
    const record = startProcess(component, binary, args, join(options.logsDir, `${component}.log`), env);
    options.started.push(record);
    journal.processes.push(record);
    await writeJournal(clusterDir, journal);
    return record;
  };

  /** Waits for a component's health endpoint (the one `cluster status` probes) to answer 200. */
  const untilHealthy = (record: ProcessRecord<NodeComponent>) =>
    waitUntil(
      record,
      "healthy",
      async () => (await probe({ url: nodeHealthUrl(journal, record.component) ?? "" })).code === 200,
      60_000,
    );

  const containerd = await start(
    "containerd",
    "containerd",
    ["--config", paths.containerdConfig],
    containerdEnvironment(process.env),
  );
  await waitUntil(
    containerd,
    "serving",
    async () =>
      (await run("ctr", [...ctrArgs(paths.containerdSocket), "version"], { timeoutMs: 5000 })).code === 0,
    60_000,
  );
  for (const archive of [
    options.images.pause.archive,
    options.images.busybox.archive,
    ...options.extraImages,
  ])
    await importImage(clusterDir, archive);
  progress(`containerd is up; imported ${2 + options.extraImages.length} images`);

  await createObjects(options.kubeConfig, realNodeObjects());
  // kubelet refuses a cgroupRoot that does not exist in every hierarchy.
  await createCgroup(cgroupRoot);
  const core = options.kubeConfig.makeApiClient(CoreV1Api);
  const kubeletStarted = Date.now();
  const kubelet = await start("kubelet", options.binaries.kubelet, kubeletArgs(layout));
  await untilHealthy(kubelet);
  await waitUntil(
    kubelet,
    `registering node ${journal.nodeName} as Ready`,
    async () => readyCondition(await readNode(core, journal.nodeName))?.status === "True",
    120_000,
  );
  const readySeconds = (Date.now() - kubeletStarted) / 1000;
  progress(
    `kubelet is up; node ${journal.nodeName} (${journal.nodeIp}) Ready in ${readySeconds.toFixed(1)}s`,
  );

  await untilHealthy(await start("kube-proxy", options.binaries["kube-proxy"], kubeProxyArgs(layout)));
  await start(
    "local-path-provisioner",
    options.binaries["local-path-provisioner"],
    provisionerArgs(layout, options.credentials.provisionerKubeconfig),
  );
  progress(
    `kube-proxy and the storage provisioner are up (default StorageClass ${realNodeDefaults.storageClass})`,
  );
  return {
    nodeName: journal.nodeName,
    nodeIp: journal.nodeIp,
    podCidr: journal.podCidr,
    bridge: journal.bridge,
    containerdSocket: paths.containerdSocket,
    storageClass: realNodeDefaults.storageClass,
    images: options.images,
    readySeconds,
  };
}

// --- teardown ------------------------------------------------------------------------------

/**
 * Undoes the node of `clusterDir`: stops its processes and every container, unmounts, and,
 * when this dir holds the machine's node (or nobody live does), removes the bridge, the
 * iptables chains, the pods' cgroups, netns, the fixed host paths the node created, restores
 * the sysctls and lets go of the lock. Idempotent; returns what it could not undo.
 */
export async function teardownNode(
  clusterDir: string,
  options: { machineWide?: boolean } = {},
): Promise<string[]> {
  const problems: string[] = [];
  const journal = await readJournal(clusterDir);
  const paths = nodePaths(clusterDir);
  const machineWide = options.machineWide ?? (await mayTouchMachine(clusterDir));
  const step = stepsInto(problems);

  // 1. The node's agents first, so that nothing restarts the containers killed next.
  const records = journal?.processes ?? [];
  const agents = records.filter((r) => r.component !== "containerd");
  await Promise.all(
    agents.map((record) => step(`stopping ${record.component}`, () => stopProcess(record, 3000))),
  );
  // 2. Every container and pod sandbox: all of them live in our cgroup.
  if (machineWide)
    await step("killing the pods' processes", async () => killAndWait(await pidsInCgroup(cgroupRoot)));
  // 3. containerd, then the shims it started (they outlive it by design) and their children.
  for (const record of records.filter((r) => r.component === "containerd"))
    await step("stopping containerd", () => stopProcess(record, 5000));
  await step("killing containerd's shims", () => killShims([paths.containerdSocket]));
  // 4. Mounts: rootfs overlays, shm, kubelet's volume tmpfs and its root bind mount.
  await step(`unmounting under ${paths.root}`, () => unmountUnder([paths.root]));
  if (!machineWide) return problems;
  problems.push(
    ...(await undoMachine(journal, {
      root: paths.root,
      bridge: checkedLink("bridge", journal?.bridge, realNodeDefaults.bridge),
      cgroupRoots: [cgroupRoot],
      clusterDir,
    })),
  );
  return problems;
}

/**
 * Runs one teardown step after another whatever the one before did: a step that throws (a
 * mount still busy, a process gone between finding and killing it) adds a sentence to
 * `problems`, and the next step runs. A step that finds problems without throwing pushes them
 * itself (`reported`).
 */
export function stepsInto(problems: string[]) {
  return async (what: string, action: () => Promise<unknown>): Promise<void> => {
    try {
      await action();
    } catch (err) {
      problems.push(`${what}: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
}

/** A step's action that returns the problems it found: they join `problems`. */
const reported = (problems: string[], action: () => Promise<string[]>) => async () => {
  problems.push(...(await action()));
};

/** Kills the node's shims (found by their containerd's socket in their arguments) and removes their sockets. */
export async function killShims(containerdSockets: string[]): Promise<void> {
  const shims = await findProcesses(
    (argv) =>
      argv[0]?.endsWith("containerd-shim-runc-v2") === true &&
      containerdSockets.some((s) => argv.includes(s)),
  );
  const shimSockets = await unixSocketsOf(shims);
  await killAndWait(shims);
  // A killed shim leaves its socket in /run/containerd/s (a path fixed by containerd).
  for (const socket of shimSockets.filter((path) => path.startsWith("/run/containerd/")))
    await rm(socket, { force: true });
}

/**
 * The machine-wide half of a teardown, once the node's processes are stopped and its mounts
 * gone: pods' netns, the bridge (and the veths on it), iptables chains, new empty nf_tables
 * tables, the pods' cgroups, the fixed host paths the node created, the sysctls, the lock.
 * Each is tried whatever happened to the ones before; the lock is let go last, always.
 * Only what the code itself records is taken from `record` (journal.ts).
 */
export async function undoMachine(
  record: MachineRecord | undefined,
  options: {
    root: string;
    /** The node's own bridge, and what the journal named instead, refused (journal.ts). */
    bridge: { link: string; refused?: string };
    cgroupRoots: string[];
    clusterDir: string;
  },
): Promise<string[]> {
  const problems: string[] = options.bridge.refused ? [options.bridge.refused] : [];
  const step = stepsInto(problems);
  try {
    // Network namespaces of the node's pods (those `up` did not find), then the bridge.
    await step(
      "removing the pods' network namespaces",
      reported(problems, () => removePodNetns(record?.netnsBefore)),
    );
    await step(`deleting bridge ${options.bridge.link}`, () => deleteBridge(options.bridge.link));
    await step(
      "removing the node's iptables chains",
      reported(problems, () => removeNodeChains(record?.chainsBefore ?? {})),
    );
    await step("removing new empty nf_tables tables", () => removeNewEmptyNftTables(record?.nftTablesBefore));
    // cgroups (a killed process can take a moment to leave its cgroup).
    for (const cgroup of options.cgroupRoots)
      await step(`removing cgroup ${cgroup}`, async () => {
        await killAndWait(await pidsInCgroup(cgroup));
        const cgroupsLeft = await removeCgroup(cgroup);
        if (cgroupsLeft.length) problems.push(`cgroups still busy: ${cgroupsLeft.join(", ")}`);
      });
    // Fixed host paths: kubelet's, when the node made them; in shared ones, the node's entries.
    const preexisting = new Set<string>(record?.preexistingPaths ?? fixedHostPaths);
    for (const path of kubeletHostPaths) {
      if (preexisting.has(path)) continue;
      await step(`removing ${path}`, async () => {
        await unmountUnder([path]);
        await rm(path, { recursive: true, force: true });
      });
    }
    if (preexisting.has("/var/log/containers"))
      await step("removing the pods' log links", () => removeLinksInto("/var/log/containers", options.root));
    await step("removing the pods' CNI results", async () => {
      const results = await readdir("/var/lib/cni/results").catch(() => [] as string[]);
      for (const name of results.filter((n) => n.startsWith(`${cniNetworkName}-`)))
        await rm(join("/var/lib/cni/results", name), { force: true });
    });
    for (const dir of sharedHostDirs) if (!preexisting.has(dir)) await rmdir(dir).catch(() => {});
    await step(
      "restoring sysctls",
      reported(problems, () => restoreSysctls(record?.sysctls)),
    );
  } finally {
    await step("letting go of the machine lock", () =>
      releaseMachineLock(machineLockPath, options.clusterDir),
    );
  }
  return problems;
}

/** Writes back the recorded sysctls that changed, those journal.ts accepts; returns the problems. */
async function restoreSysctls(recorded: unknown): Promise<string[]> {
  const { restore, refused } = checkedSysctls(recorded);
  const problems = [...refused];
  for (const [name, value] of Object.entries(restore)) {
    if ((await readSysctl(name)) === value) continue;
    await writeSysctl(name, value).catch((err: Error) => problems.push(`sysctl ${name}: ${err.message}`));
  }
  return problems;
}

/**
 * Removes the pods' netns files: the `cni-*` ones that `up` did not find. Without a record of
 * what was there, none is removed, and those present are reported.
 */
async function removePodNetns(before: string[] | undefined): Promise<string[]> {
  const problems: string[] = [];
  for (const dir of await netnsDirs()) {
    const entries = await readdir(dir).catch(() => [] as string[]);
    if (!before) {
      const present = entries.filter((n) => n.startsWith("cni-"));
      if (present.length)
        problems.push(
          `left ${present.length} network namespaces in ${dir} (${present.slice(0, 3).join(", ")}${present.length > 3 ? ", ..." : ""}): the journal does not record which existed before the node`,
        );
      continue;
    }
    for (const name of netnsToRemove(entries, before)) {
      const problem = await removeNetns(join(dir, name));
      if (problem) problems.push(problem);
    }
  }
  return problems;
}

/**
 * Unmounts and removes one pod netns file. A netns still mounted elsewhere (a shared mount's
 * copy, a process inside) makes the unlink fail with EBUSY: it is detached lazily and tried
 * once more, then reported, never thrown, so the rest of the teardown still runs.
 */
async function removeNetns(path: string): Promise<string | undefined> {
  await unmountUnder([path]);
  try {
    await rm(path, { force: true });
    return undefined;
  } catch {
    await run("umount", ["--lazy", path]);
    const covered = (await listMounts()).some((m) => m.mountPoint === dirname(path));
    return rm(path, { force: true }).then(
      () => undefined,
      (err: Error) =>
        `netns ${path}: ${err.message}${covered ? ` (${dirname(path)} is mounted over itself, as \`ip netns add\` does, hiding the netns mounts under it)` : ""}`,
    );
  }
}

/** Removes the symlinks in `dir` that point into `target` (kubelet's /var/log/containers links). */
async function removeLinksInto(dir: string, target: string): Promise<void> {
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const link = await readlink(join(dir, name)).catch(() => "");
    if (link.startsWith(`${target}/`)) await rm(join(dir, name), { force: true });
  }
}

// --- several nodes' journal and teardown (fleet.ts starts them) ---------------------------

/** One node of the fleet, as the journal keeps it. */
export interface MemberJournal extends Member {
  root: string;
  netns: string;
  /** Its containerd, kubelet and kube-proxy, as last started. */
  processes: ProcessRecord[];
}

export interface FleetJournal extends MachineRecord {
  version: 1;
  hostBridge: string;
  hostIp: string;
  /** The same ports in every node: each node has its own network namespace. */
  ports: NodePorts;
  members: MemberJournal[];
  /** Processes on the host (the storage provisioner). */
  processes: ProcessRecord[];
  /** The kubelet and kube-proxy the nodes run (`node start` runs them again). */
  binaries?: NodeBinaryPaths;
  startedAt: string;
}

export async function readFleetJournal(clusterDir: string): Promise<FleetJournal | undefined> {
  try {
    return JSON.parse(await readFile(fleetPaths(clusterDir).journal, "utf8")) as FleetJournal;
  } catch {
    return undefined;
  }
}

/** The containerd socket of one node of several. */
export const memberSocketOf = (member: MemberJournal) => memberPathsAt(member.root).containerdSocket;

/**
 * Undoes the fleet of `clusterDir`: its agents and containers, every containerd and shim, the
 * mounts under its dir (the namespaces' files among them: a namespace with no process and no
 * mount is gone), and, when this dir holds the machine's nodes (or nobody live does), the
 * bridge and veths, chains, cgroups, fixed host paths, sysctls and the lock. Idempotent;
 * returns what it could not undo.
 */
export async function teardownFleet(
  clusterDir: string,
  options: { machineWide?: boolean } = {},
): Promise<string[]> {
  const journal = await readFleetJournal(clusterDir);
  const paths = fleetPaths(clusterDir);
  const machineWide = options.machineWide ?? (await mayTouchMachine(clusterDir));
  const problems: string[] = [];
  const step = stepsInto(problems);
  const members = journal?.members ?? [];
  const records = [...(journal?.processes ?? []), ...members.flatMap((m) => m.processes)];
  const stop = (r: ProcessRecord, ms: number) => step(`stopping ${r.component}`, () => stopProcess(r, ms));
  await Promise.all(records.filter((r) => r.component !== "containerd").map((r) => stop(r, 3000)));
  // Only cgroups of the names the code gives (config.ts memberOf): a journal is a file.
  const ownCgroups = members.map((m) => m.cgroupRoot).filter((c) => /^mlmodel-node-\d+$/.test(c));
  if (machineWide)
    for (const cgroup of ownCgroups)
      await step(`killing the pods of ${cgroup}`, async () => killAndWait(await pidsInCgroup(cgroup)));
  await Promise.all(records.filter((r) => r.component === "containerd").map((r) => stop(r, 5000)));
  await step("killing containerd's shims", () => killShims(members.map(memberSocketOf)));
  // A process an `up` killed half-way started but did not live to record: it names the nodes' dir.
  await step("killing processes left in the nodes' dir", async () =>
    killAndWait(await findProcesses((argv) => argv.some((arg) => arg.startsWith(`${paths.root}/`)))),
  );
  await step(`unmounting under ${paths.root}`, () => unmountUnder([paths.root]));
  if (!machineWide) return problems;
  problems.push(
    ...(await undoMachine(journal, {
      root: paths.root,
      bridge: checkedLink("hostBridge", journal?.hostBridge, multiNodeDefaults.hostBridge),
      cgroupRoots: ownCgroups,
      clusterDir,
    })),
  );
  return problems;
}

// --- health --------------------------------------------------------------------------------

export interface NodeHealth {
  nodeName: string;
  /** The Node's Ready condition: "True", "False", "Unknown", or "absent". */
  ready: string;
  reason: string;
  message: string;
  kubeletVersion?: string;
}

/** The Node object's view of the real node (what kubelet reports to the API server). */
export async function nodeCondition(kubeConfig: KubeConfig, nodeName: string): Promise<NodeHealth> {
  const node = await readNode(kubeConfig.makeApiClient(CoreV1Api), nodeName);
  const ready = readyCondition(node);
  return {
    nodeName,
    ready: node ? (ready?.status ?? "Unknown") : "absent",
    reason: ready?.reason ?? (node ? "" : "the Node object does not exist"),
    message: ready?.message ?? "",
    kubeletVersion: node?.status?.nodeInfo?.kubeletVersion,
  };
}

/** Health endpoints of the node's components (the provisioner has none: alive is healthy). */
export function nodeHealthUrl(journal: NodeJournal, component: NodeComponent): string | undefined {
  switch (component) {
    case "containerd":
      return `http://127.0.0.1:${journal.ports.containerdMetrics}/v1/metrics`;
    case "kubelet":
      return `http://127.0.0.1:${journal.ports.kubeletHealthz}/healthz`;
    case "kube-proxy":
      return `http://127.0.0.1:${journal.ports.kubeProxyHealthz}/healthz`;
    case "local-path-provisioner":
      return undefined;
  }
}

export { HostError };
