/**
 * What a machine needs to host the real node, how to tell whether it can, and how to get
 * there: Debian packages (installed with apt-get as root when missing), kernel features that
 * no package brings (overlayfs, writable cgroups, bridges), the node's binaries (built from Go
 * modules and cached) and its two images (pause, busybox).
 */
import { existsSync } from "node:fs";
import { access, constants, readFile } from "node:fs/promises";
import { join } from "node:path";
import { type Asker, aptInstall, PrerequisiteError, thisProcess } from "../apt.ts";
import {
  ensureNodeBinaries,
  entriesDir,
  inspectEntry,
  type NodeBinaryPaths,
  nodeBinariesAvailable,
  nodeBinaryNames,
  nodeCacheProblem,
  nodeRecipes,
  type ProgressFn,
} from "../binaries.ts";
import { listMounts } from "./host.ts";
import { cachedBusybox, ensureNodeImages, type NodeImages } from "./images.ts";

/** A command (or file) the node needs, and the Debian package that provides it. */
interface Requirement {
  path: string;
  pkg: string;
  why: string;
}

const cniDir = "/usr/lib/cni";

export const requirements: Requirement[] = [
  { path: "containerd", pkg: "containerd", why: "the container runtime" },
  { path: "containerd-shim-runc-v2", pkg: "containerd", why: "containerd's shim" },
  { path: "ctr", pkg: "containerd", why: "image import" },
  { path: "runc", pkg: "runc", why: "the OCI runtime" },
  { path: `${cniDir}/bridge`, pkg: "containernetworking-plugins", why: "pod networking" },
  { path: `${cniDir}/host-local`, pkg: "containernetworking-plugins", why: "pod IP addresses" },
  { path: `${cniDir}/loopback`, pkg: "containernetworking-plugins", why: "each pod's lo" },
  { path: `${cniDir}/portmap`, pkg: "containernetworking-plugins", why: "hostPort" },
  { path: "iptables", pkg: "iptables", why: "kube-proxy's Services and our guard rules" },
  { path: "ip6tables", pkg: "iptables", why: "kubelet's IPv6 chains" },
  { path: "iptables-save", pkg: "iptables", why: "cleaning up at down" },
  { path: "iptables-restore", pkg: "iptables", why: "kube-proxy" },
  { path: "nft", pkg: "nftables", why: "removing the nf_tables tables the node created, at down" },
  { path: "conntrack", pkg: "conntrack", why: "kube-proxy's stale-connection cleanup" },
  { path: "ip", pkg: "iproute2", why: "the bridge" },
  { path: "mount", pkg: "mount", why: "unmounting at down" },
  { path: "nsenter", pkg: "util-linux", why: "kubelet's port-forward" },
  { path: "apt-get", pkg: "apt", why: "fetching busybox-static for the helper image" },
  { path: "dpkg-deb", pkg: "dpkg", why: "unpacking busybox-static" },
];

const searchPath = () => (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/sbin"]);

function found(path: string): boolean {
  if (path.startsWith("/")) return existsSync(path);
  return searchPath().some((dir) => dir && existsSync(join(dir, path)));
}

export function missingRequirements(): Requirement[] {
  return requirements.filter((r) => !found(r.path));
}

/** What kind of machine this is, as far as hosting a real node goes before any kernel feature. */
export interface MachineKind {
  platform: string;
  arch: string;
  uid: number | undefined;
}

export const thisMachine = (): MachineKind => ({
  platform: process.platform,
  arch: process.arch,
  uid: process.getuid?.(),
});

/** Why a machine of this kind can never host the real node (not Linux, not root), or undefined. */
export function machineKindProblem(machine: Pick<MachineKind, "platform" | "uid">): string | undefined {
  if (machine.platform !== "linux") return `the real node needs Linux (this is ${machine.platform})`;
  if (machine.uid !== 0)
    return "the real node needs root (kubelet, containerd and runc create cgroups, mounts, network namespaces and iptables rules); run as root";
  return undefined;
}

/** Kernel and privilege checks that no package can fix; each failure is a sentence. */
export async function kernelProblems(asker: Asker = thisProcess()): Promise<string[]> {
  const problems: string[] = [];
  const kindProblem = machineKindProblem({ platform: process.platform, uid: asker.uid });
  if (kindProblem) return [kindProblem];
  const filesystems = await readFile("/proc/filesystems", "utf8").catch(() => "");
  if (!/\toverlay$/m.test(filesystems))
    problems.push(
      "the kernel has no overlayfs (containerd's snapshotter needs it): /proc/filesystems lacks overlay",
    );
  // Read-only checks: another run's snapshot of the machine may be watching (no probe cgroup
  // or bridge is made and removed here).
  const mounts = await listMounts();
  const hierarchies = mounts.filter((m) => m.fsType === "cgroup" || m.fsType === "cgroup2");
  if (hierarchies.length === 0) problems.push("no cgroup filesystem is mounted under /sys/fs/cgroup");
  for (const { mountPoint, options } of hierarchies) {
    const writable =
      !options.split(",").includes("ro") &&
      (await access(mountPoint, constants.W_OK).then(
        () => true,
        () => false,
      ));
    if (!writable)
      problems.push(
        `the cgroup hierarchy ${mountPoint} is read-only: kubelet needs write access to every cgroup hierarchy`,
      );
  }
  if (!existsSync("/proc/self/ns/net")) problems.push("the kernel has no network namespaces");
  const release = (await readFile("/proc/sys/kernel/osrelease", "utf8").catch(() => "")).trim();
  if (!existsSync("/sys/module/bridge") && !existsSync(`/lib/modules/${release}/kernel/net/bridge`))
    problems.push("the kernel has no bridge support (neither built in nor as a module)");
  return problems;
}

export { aptInstall, PrerequisiteError };

export type RealNodeSupport = { ok: true } | { ok: false; reason: string };

/**
 * Whether this machine can host the real node, without changing it. Missing Debian packages
 * do not count against it when apt-get can install them (ensureRealNodePrerequisites does).
 */
export async function realNodeSupport(asker: Asker = thisProcess()): Promise<RealNodeSupport> {
  const problems = await kernelProblems(asker);
  if (problems.length > 0) return { ok: false, reason: problems.join("; ") };
  const missing = missingRequirements();
  if (missing.length > 0 && !found("apt-get")) {
    const packages = [...new Set(missing.map((r) => r.pkg))];
    return {
      ok: false,
      reason: `missing ${missing.map((r) => r.path).join(", ")} and no apt-get to install them (packages: ${packages.join(" ")})`,
    };
  }
  if (!(await nodeBinariesAvailable())) {
    return {
      ok: false,
      reason:
        "kubelet, kube-proxy and the provisioner are not cached and no Go toolchain is on PATH to build them",
    };
  }
  return { ok: true };
}

/**
 * What ensureRealNodePrerequisites would still have to do, found by reading only (no build, no
 * apt-get, no network): a sentence, or undefined when everything is in place.
 */
export async function realNodePrerequisitesMissing(): Promise<string | undefined> {
  const missing = missingRequirements();
  if (missing.length > 0)
    return `missing ${missing.map((r) => r.path).join(", ")} (Debian packages ${[...new Set(missing.map((r) => r.pkg))].join(" ")})`;
  const userDir = process.env.MLMODEL_CONTROLPLANE_BIN_DIR;
  if (!userDir || !nodeBinaryNames.every((name) => existsSync(join(userDir, name)))) {
    const cacheProblem = await nodeCacheProblem();
    if (cacheProblem) return cacheProblem;
    for (const recipe of nodeRecipes()) {
      const entry = await inspectEntry(join(entriesDir(), recipe.key), recipe);
      if (entry.state !== "ok") return `${recipe.key} is not built yet (cold: ${recipe.coldBuild})`;
    }
  }
  if (!(await cachedBusybox())) return "Debian's busybox-static (for the helper image) is not fetched yet";
  return undefined;
}

export interface RealNodePrerequisites {
  binaries: NodeBinaryPaths;
  images: NodeImages;
}

/**
 * Makes this machine ready to host the real node: installs missing Debian packages (as root),
 * builds or takes from the cache kubelet, kube-proxy, the storage provisioner and pause, and
 * packs the pause and busybox images. Throws a PrerequisiteError naming what is missing and
 * why it cannot be had.
 */
export async function ensureRealNodePrerequisites(
  progress: ProgressFn = () => {},
): Promise<RealNodePrerequisites> {
  const problems = await kernelProblems();
  if (problems.length > 0)
    throw new PrerequisiteError(`this machine cannot host a real node: ${problems.join("; ")}`);
  const missing = missingRequirements();
  if (missing.length > 0) {
    const packages = [...new Set(missing.map((r) => r.pkg))];
    if (!found("apt-get")) {
      throw new PrerequisiteError(
        `the real node needs ${missing.map((r) => `${r.path} (${r.why})`).join(", ")}; install the packages ${packages.join(" ")}`,
      );
    }
    await aptInstall(packages, progress);
    const still = missingRequirements();
    if (still.length > 0)
      throw new PrerequisiteError(
        `after installing ${packages.join(" ")}, still missing: ${still.map((r) => r.path).join(", ")}`,
      );
  }
  const binaries = await ensureNodeBinaries(progress);
  const images = await ensureNodeImages(binaries.pause, progress);
  return { binaries, images };
}
