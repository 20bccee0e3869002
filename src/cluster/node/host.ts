/**
 * Small, honest wrappers around what the real node does to the machine: commands, sysctls,
 * mounts, cgroups and processes. Each reads or changes one thing and says what failed.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, readdir, readFile, readlink, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion; never throws (a missing command is exit code 127). */
export function run(
  command: string,
  args: string[],
  options: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<RunResult> {
  return new Promise((resolvePromise) => {
    const child = spawn(command, args, {
      env: options.env ?? process.env,
      stdio: ["pipe", "pipe", "pipe"],
      timeout: options.timeoutMs,
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    child.on("error", (err) => resolvePromise({ code: 127, stdout, stderr: stderr + err.message }));
    child.on("close", (code, signal) =>
      resolvePromise({
        code: code ?? (signal ? 128 : 1),
        stdout,
        stderr: stderr + (signal ? ` (${signal})` : ""),
      }),
    );
    // A command that exits without reading its input must not fail us with EPIPE.
    child.stdin.on("error", () => {});
    child.stdin.end(options.input ?? "");
  });
}

export class HostError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HostError";
  }
}

/** Runs a command and throws a HostError naming it (and its stderr) when it fails. */
export async function runChecked(command: string, args: string[], input?: string): Promise<string> {
  const result = await run(command, args, { input });
  if (result.code !== 0) {
    throw new HostError(
      `\`${[command, ...args].join(" ")}\` failed (exit ${result.code}): ${result.stderr.trim() || result.stdout.trim()}`,
    );
  }
  return result.stdout;
}

// --- sysctls -------------------------------------------------------------------------------

const sysctlPath = (name: string) => join("/proc/sys", ...name.split("."));

export async function readSysctl(name: string): Promise<string | undefined> {
  try {
    return (await readFile(sysctlPath(name), "utf8")).trim();
  } catch {
    return undefined;
  }
}

export async function writeSysctl(name: string, value: string): Promise<void> {
  await writeFile(sysctlPath(name), value);
}

// --- mounts --------------------------------------------------------------------------------

export interface Mount {
  mountPoint: string;
  fsType: string;
  source: string;
  /** Per-mount options (rw, ro, nosuid...). */
  options: string;
}

/** Decodes the octal escapes (\040 for a space...) of /proc/self/mountinfo. */
const unescapeMountPath = (path: string) =>
  path.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));

export function parseMountInfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split("\n")) {
    if (!line) continue;
    const [before, after] = line.split(" - ");
    const fields = before?.split(" ") ?? [];
    const [fsType, source] = after?.split(" ") ?? [];
    if (fields[4] && fsType)
      mounts.push({
        mountPoint: unescapeMountPath(fields[4]),
        fsType,
        source: source ?? "",
        options: fields[5] ?? "",
      });
  }
  return mounts;
}

export async function listMounts(): Promise<Mount[]> {
  return parseMountInfo(await readFile("/proc/self/mountinfo", "utf8"));
}

const isUnder = (path: string, prefix: string) => path === prefix || path.startsWith(`${prefix}/`);

/**
 * Unmounts everything mounted at or below any of `prefixes`, deepest first (a mount stacked
 * on another goes before it). A busy mount is detached lazily rather than left in place.
 */
export async function unmountUnder(prefixes: string[]): Promise<string[]> {
  const unmounted: string[] = [];
  for (let pass = 0; pass < 5; pass++) {
    const targets = (await listMounts())
      .map((m) => m.mountPoint)
      .filter((point) => prefixes.some((prefix) => isUnder(point, prefix)))
      .sort((a, b) => b.length - a.length);
    if (targets.length === 0) break;
    for (const target of targets) {
      const result = await run("umount", [target]);
      if (result.code !== 0) await run("umount", ["--lazy", target]);
      unmounted.push(target);
    }
  }
  return unmounted;
}

// --- cgroups -------------------------------------------------------------------------------

/** Mount points of every cgroup hierarchy (v1 controllers and the v2 unified one). */
export async function cgroupHierarchies(): Promise<string[]> {
  return (await listMounts())
    .filter((m) => m.fsType === "cgroup" || m.fsType === "cgroup2")
    .map((m) => m.mountPoint);
}

async function cgroupTree(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const children = await Promise.all(
    entries.filter((e) => e.isDirectory()).map((e) => cgroupTree(join(dir, e.name))),
  );
  return [...children.flat(), dir];
}

/** Pids in the cgroup `name` (relative to each hierarchy) and below it, in every hierarchy. */
export async function pidsInCgroup(name: string): Promise<number[]> {
  const pids = new Set<number>();
  for (const hierarchy of await cgroupHierarchies()) {
    for (const dir of await cgroupTree(join(hierarchy, name))) {
      const text = await readFile(join(dir, "cgroup.procs"), "utf8").catch(() => "");
      for (const pid of text.split("\n").filter(Boolean)) pids.add(Number(pid));
    }
  }
  return [...pids];
}

/**
 * Creates the cgroup `name` in every hierarchy. In cgroup v1's cpuset hierarchy a new cgroup
 * starts with no CPUs and no memory nodes (no process could join it): it gets its parent's.
 */
export async function createCgroup(name: string): Promise<void> {
  for (const hierarchy of await cgroupHierarchies()) {
    const dir = join(hierarchy, name);
    await mkdir(dir, { recursive: true });
    for (const file of ["cpuset.cpus", "cpuset.mems"]) {
      if (!existsSync(join(dir, file))) continue;
      const current = (await readFile(join(dir, file), "utf8")).trim();
      if (!current) await writeFile(join(dir, file), await readFile(join(hierarchy, file), "utf8"));
    }
  }
}

/** Removes the cgroup `name` and every cgroup below it in every hierarchy; returns what remains. */
export async function removeCgroup(name: string): Promise<string[]> {
  const left: string[] = [];
  for (const hierarchy of await cgroupHierarchies()) {
    const root = join(hierarchy, name);
    if (!existsSync(root)) continue;
    for (const dir of await cgroupTree(root)) {
      // An emptied cgroup can still be busy for a moment while the kernel frees its memory.
      let removed = false;
      for (let attempt = 0; attempt < 20 && !removed; attempt++) {
        removed = await rmdir(dir).then(
          () => true,
          (err: NodeJS.ErrnoException) => err.code === "ENOENT",
        );
        if (!removed) await new Promise((r) => setTimeout(r, 100));
      }
      if (!removed) left.push(dir);
    }
  }
  return left;
}

// --- processes -----------------------------------------------------------------------------

/** Pids whose command line (NUL-separated argv) satisfies `match`. */
export async function findProcesses(match: (argv: string[]) => boolean): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (cmdline && match(cmdline.split("\0").filter(Boolean))) pids.push(Number(entry));
  }
  return pids;
}

/**
 * Paths of the unix sockets that the processes `pids` hold open (their fds matched by inode to
 * the /proc/PID/net/unix of their own network namespace). containerd's shims listen in /run/containerd/s and remove their
 * socket only when they exit cleanly: after a kill, these are what is left to remove.
 */
export async function unixSocketsOf(pids: number[]): Promise<string[]> {
  const paths = new Set<string>();
  for (const pid of pids) {
    const inodes = new Set<string>();
    const fds = await readdir(`/proc/${pid}/fd`).catch(() => [] as string[]);
    for (const fd of fds) {
      const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => "");
      const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
      if (inode) inodes.add(inode);
    }
    // The table of the process's own network namespace (a node's shims run in the node's).
    const table = await readFile(`/proc/${pid}/net/unix`, "utf8").catch(() => "");
    for (const line of table.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields.length >= 8 && inodes.has(fields[6]!) && fields[7]!.startsWith("/")) paths.add(fields[7]!);
    }
  }
  return [...paths];
}

/** SIGKILLs each pid and waits until all are gone (or 10 s have passed). */
export async function killAndWait(pids: number[]): Promise<void> {
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && pids.some((pid) => existsSync(`/proc/${pid}/stat`) && !isZombie(pid))) {
    await new Promise((r) => setTimeout(r, 50));
  }
}

function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return false;
  }
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat): with the pid, it names one process for good. */
export async function processStartTime(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => undefined);
  if (!stat) return undefined;
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
}
