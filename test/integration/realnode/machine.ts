/**
 * A snapshot of everything the real node can change on the machine, to prove that `down`
 * undoes it all: the node's processes, mounts, network links and addresses, iptables and
 * ip6tables rules, nf_tables tables, cgroup directories in every hierarchy, the sysctls it
 * touches, and the fixed host paths kubelet, containerd and CNI use.
 *
 * Other engineers' work shares the machine meanwhile (image builds mount chroots, image tests
 * run a containerd of their own with shims, sockets, overlay mounts and cgroups), so each part
 * is compared where the node could have changed it: mounts under its dir and the fixed paths,
 * cgroups named like the node's, shim sockets that no live process holds, netns and CNI
 * results of the node's network.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { type Dirent, existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  cgroupRoot,
  cniNetworkName,
  kubeletHostPaths,
  sharedHostDirs,
} from "../../../src/cluster/node/config.ts";
import { parseMountInfo } from "../../../src/cluster/node/host.ts";
import { waitFor } from "../../harness/cluster.ts";

/** Sysctls that change by themselves (counters, random values): everything else is compared. */
const volatileSysctl =
  /^(fs\.(inode-state|inode-nr|dentry-state|file-nr|aio-nr|quota\.)|kernel\.(random\.|ns_last_pid|pty\.nr|hung_task_detect_count)|net\.netfilter\.nf_conntrack_count)/;

/** Every sysctl of the machine, not only the ones the node is known to touch. */
function allSysctls(): Record<string, string> {
  const values: Record<string, string> = {};
  // Entries of links that come and go meanwhile (another run's pods) vanish as we read them.
  const walk = (dir: string) => {
    let entries: Dirent[] = [];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const path = join(dir, entry.name);
      const name = path.slice("/proc/sys/".length).replaceAll("/", ".");
      if (entry.isDirectory()) walk(path);
      else if (!volatileSysctl.test(name)) {
        try {
          values[name] = readFileSync(path, "utf8").trim();
        } catch {
          // Write-only, unreadable, or gone.
        }
      }
    }
  };
  walk("/proc/sys");
  return values;
}

const sh = (command: string, args: string[]) => {
  try {
    return execFileSync(command, args, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  } catch {
    return `(${command} unavailable)`;
  }
};

/**
 * Cgroups kubelet and runc make for pods: under the node's root (or the roots of several
 * nodes, mlmodel-node-N; or kubelet's default one).
 */
const nodeCgroup = new RegExp(`/(${cgroupRoot}(-\\d+)?|kubepods)(/|$)`, "m");

/**
 * Processes of this node: those whose arguments name its dir (containerd, kubelet, kube-proxy,
 * the provisioner, containerd's shims through its socket) and those in its cgroup (pods).
 * Other engineers' containerd instances on the same machine are none of its business.
 */
function nodeProcesses(clusterDir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").filter(Boolean);
      const cgroups = readFileSync(`/proc/${entry}/cgroup`, "utf8");
      if (argv.some((a) => a.includes(clusterDir)) || nodeCgroup.test(cgroups)) found.push(argv.join(" "));
    } catch {
      // Ended while we looked.
    }
  }
  return found.sort();
}

function relevantMounts(clusterDir: string): string[] {
  const prefixes = [clusterDir, ...kubeletHostPaths, ...sharedHostDirs, "/sys/fs/cgroup"];
  return parseMountInfo(readFileSync("/proc/self/mountinfo", "utf8"))
    .filter((m) => prefixes.some((p) => m.mountPoint === p || m.mountPoint.startsWith(`${p}/`)))
    .map((m) => `${m.mountPoint} ${m.fsType} ${m.source}`)
    .sort();
}

function cgroupDirs(): string[] {
  const hierarchies = parseMountInfo(readFileSync("/proc/self/mountinfo", "utf8"))
    .filter((m) => m.fsType === "cgroup" || m.fsType === "cgroup2")
    .map((m) => m.mountPoint);
  const dirs: string[] = [];
  const walk = (dir: string) => {
    dirs.push(dir);
    for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(join(dir, e.name));
  };
  for (const h of hierarchies) walk(h);
  return dirs.filter((dir) => nodeCgroup.test(dir)).sort();
}

/** Sockets in a directory that no live process has bound (what a killed shim leaves). */
function orphanedSockets(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const bound = new Set(
    readFileSync("/proc/net/unix", "utf8")
      .split("\n")
      .map((line) => line.trim().split(/\s+/)[7])
      .filter(Boolean),
  );
  return readdirSync(dir)
    .map((name) => join(dir, name))
    .filter((path) => !bound.has(path))
    .sort();
}

const entries = (dir: string, pattern: RegExp) =>
  existsSync(dir)
    ? readdirSync(dir)
        .filter((name) => pattern.test(name))
        .sort()
    : [];

/** iptables-save without comments and packet counters, which change with any traffic. */
const rules = (text: string) =>
  text
    .split("\n")
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => l.replace(/\[\d+:\d+\]/, "[counters]"))
    .join("\n");

function listing(path: string): string[] {
  if (!existsSync(path)) return ["(absent)"];
  try {
    return readdirSync(path, { recursive: true, encoding: "utf8" }).sort();
  } catch {
    return ["(not a directory)"];
  }
}

export interface MachineState {
  processes: string[];
  mounts: string[];
  links: string;
  addresses: string;
  routes: string;
  iptables: string;
  ip6tables: string;
  nftTables: string;
  cgroups: string[];
  sysctls: Record<string, string>;
  fixedPaths: Record<string, string[]>;
}

export function snapshotMachine(clusterDir: string): MachineState {
  const fixedPaths: Record<string, string[]> = {};
  for (const path of kubeletHostPaths) fixedPaths[path] = listing(path);
  fixedPaths["/run/containerd/s (orphaned sockets)"] = orphanedSockets("/run/containerd/s");
  fixedPaths["/run/netns (pods' netns)"] = entries("/run/netns", /^cni-/);
  fixedPaths["/var/lib/cni/results (the node's network)"] = entries(
    "/var/lib/cni/results",
    new RegExp(`^${cniNetworkName}-`),
  );
  return {
    processes: nodeProcesses(clusterDir),
    mounts: relevantMounts(clusterDir),
    // Names, kinds and masters of links, without the counters and states that traffic changes.
    links: sh("ip", ["-o", "-d", "link", "show"])
      .split("\n")
      .map((l) => /^\d+: (\S+?):.*?(?:master (\S+))?/.exec(l)?.slice(1).join(" ") ?? "")
      .filter(Boolean)
      .sort()
      .join("\n"),
    addresses: sh("ip", ["-o", "addr", "show"])
      .split("\n")
      .map((l) => l.replace(/valid_lft \S+ preferred_lft \S+/, ""))
      .sort()
      .join("\n"),
    routes: sh("ip", ["route", "show", "table", "all"]).split("\n").sort().join("\n"),
    iptables: rules(sh("iptables-save", [])),
    ip6tables: rules(sh("ip6tables-save", [])),
    nftTables: sh("nft", ["list", "tables"]),
    cgroups: cgroupDirs(),
    sysctls: allSysctls(),
    fixedPaths,
  };
}

/** The differences between two snapshots, item by item, for a readable failure. */
export function differences(before: MachineState, after: MachineState): string[] {
  const out: string[] = [];
  for (const key of Object.keys(before) as (keyof MachineState)[]) {
    const [a, b] = [before[key], after[key]];
    if (JSON.stringify(a) === JSON.stringify(b)) continue;
    if (typeof a === "string" || typeof b === "string") {
      const [linesA, linesB] = [String(a).split("\n"), String(b).split("\n")];
      const gone = linesA.filter((l) => !linesB.includes(l));
      const added = linesB.filter((l) => !linesA.includes(l));
      out.push(`${key}: - ${JSON.stringify(gone)} + ${JSON.stringify(added)}`);
    } else if (Array.isArray(a) && Array.isArray(b)) {
      out.push(
        `${key}: - ${JSON.stringify(a.filter((x) => !b.includes(x)))} + ${JSON.stringify(b.filter((x) => !a.includes(x)))}`,
      );
    } else {
      const [ra, rb] = [a as Record<string, unknown>, b as Record<string, unknown>];
      for (const item of new Set([...Object.keys(ra), ...Object.keys(rb)]))
        if (JSON.stringify(ra[item]) !== JSON.stringify(rb[item]))
          out.push(`${key} ${item}: ${JSON.stringify(ra[item])} -> ${JSON.stringify(rb[item])}`);
    }
  }
  return out;
}

export async function assertMachineAsBefore(dir: string, before: MachineState): Promise<void> {
  // The watchdog, if any, exits within its 2 s poll once the cluster is gone.
  let diff: string[] = [];
  await waitFor(
    "the machine to be as it was before the node",
    async () => {
      diff = differences(before, snapshotMachine(dir));
      return diff.length === 0;
    },
    { timeoutMs: 30_000, intervalMs: 500 },
  ).catch(() => assert.fail(`the node left changes behind:\n${diff.join("\n")}`));
}
