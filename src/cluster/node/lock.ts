/**
 * One real node per machine: kubelet and containerd use fixed host paths (/var/lib/kubelet,
 * /var/log/pods, /run/containerd/s, /run/netns...), so two nodes would trample each other.
 * A machine-wide lock file names the cluster dir that holds the node. It stays held while
 * that node runs (the `up` that started it has long exited), so whether a holder is alive is
 * asked of the caller (`isAlive`): a lock whose holder is gone is taken over.
 *
 * The lock file is only ever read and written inside a short critical section: a directory
 * made with mkdir (atomic), itself considered abandoned after 30 s.
 */

import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, rmdir, stat, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import type { ProgressFn } from "../binaries.ts";
import { processStartTime } from "./host.ts";

export interface LockRecord {
  /** The cluster dir whose node holds the machine. */
  dir: string;
  /** The `up` that took the lock (it may have exited since: the node outlives it). */
  pid: number;
  pidStart?: string;
  since: string;
  /**
   * A process that reserved the machine's node for `dir` beyond one up/down (a test that
   * compares the machine before up and after down): the lock outlives `down` until it goes.
   */
  reservedBy?: { pid: number; pidStart?: string };
}

export class MachineLockError extends Error {
  readonly holder: LockRecord;
  constructor(message: string, holder: LockRecord) {
    super(message);
    this.name = "MachineLockError";
    this.holder = holder;
  }
}

const guardStaleMs = 30_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function withGuard<T>(lockPath: string, fn: () => Promise<T>): Promise<T> {
  const guard = `${lockPath}.guard`;
  for (;;) {
    try {
      await mkdir(guard);
      break;
    } catch (err) {
      // The lock's directory is removed with the last lock: make it again.
      if ((err as NodeJS.ErrnoException).code === "ENOENT") {
        await mkdir(dirname(lockPath), { recursive: true });
        continue;
      }
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const age = Date.now() - ((await stat(guard).catch(() => undefined))?.mtimeMs ?? Date.now());
      if (age > guardStaleMs) await rmdir(guard).catch(() => {});
      else await sleep(20);
    }
  }
  try {
    return await fn();
  } finally {
    await rmdir(guard).catch(() => {});
    // Leave no empty directory behind once nobody holds the node (fails while a lock is there).
    if (!existsSync(lockPath)) await rmdir(dirname(lockPath)).catch(() => {});
  }
}

export async function readLock(lockPath: string): Promise<LockRecord | undefined> {
  try {
    return JSON.parse(await readFile(lockPath, "utf8")) as LockRecord;
  } catch {
    return undefined;
  }
}

async function writeLock(lockPath: string, record: LockRecord): Promise<void> {
  const staging = `${lockPath}.${process.pid}.tmp`;
  await writeFile(staging, `${JSON.stringify(record, null, 2)}\n`);
  await rename(staging, lockPath);
}

export interface AcquireOptions {
  lockPath: string;
  dir: string;
  /** Whether the node of a recorded holder still runs (pid of `up`, or its node's processes). */
  isAlive: (holder: LockRecord) => Promise<boolean>;
  /** How long to wait for a live holder to let go; 0 fails at once. */
  waitMs: number;
  progress: ProgressFn;
  /** Reserve the node for `dir` until this process ends or calls releaseMachineLock with `reservation`. */
  reserve?: boolean;
}

async function sameProcess(pid: number, pidStart: string | undefined): Promise<boolean> {
  const start = await processStartTime(pid);
  return start !== undefined && (pidStart === undefined || pidStart === start);
}

/** True when the process that took the lock, or one that reserved it, still runs. */
export async function takerAlive(holder: LockRecord): Promise<boolean> {
  if (await sameProcess(holder.pid, holder.pidStart)) return true;
  return holder.reservedBy !== undefined && sameProcess(holder.reservedBy.pid, holder.reservedBy.pidStart);
}

/**
 * Takes the machine's real-node lock for `dir`. Resolves to the record of a dead holder it
 * took over (its leftovers are the caller's to clean), if any. Throws MachineLockError naming
 * the holder's dir when it is alive and does not let go within `waitMs`.
 */
export async function acquireMachineLock(options: AcquireOptions): Promise<{ takenOver?: LockRecord }> {
  const deadline = Date.now() + options.waitMs;
  let announced = 0;
  for (;;) {
    const outcome = await withGuard(options.lockPath, async () => {
      const holder = await readLock(options.lockPath);
      const self = { pid: process.pid, pidStart: await processStartTime(process.pid) };
      // The same dir again (its reservation, or an up after a crashed one): re-entrant.
      if (holder?.dir === options.dir) {
        await writeLock(options.lockPath, {
          ...holder,
          ...self,
          ...(options.reserve ? { reservedBy: self } : {}),
        });
        return {};
      }
      if (holder && (await options.isAlive(holder))) return { holder };
      await writeLock(options.lockPath, {
        dir: options.dir,
        ...self,
        since: new Date().toISOString(),
        ...(options.reserve ? { reservedBy: self } : {}),
      });
      return { takenOver: holder };
    });
    if (!("holder" in outcome) || !outcome.holder) return { takenOver: outcome.takenOver };
    const { holder } = outcome;
    const what = `the real node of this machine is held by the cluster in ${holder.dir} (since ${holder.since})`;
    if (Date.now() >= deadline) {
      throw new MachineLockError(
        `${what}; one machine hosts one real node (kubelet and containerd use fixed host paths).\n` +
          `  Stop it (mlmodel cluster down --dir ${holder.dir}), or wait for it with --node-wait SECONDS.`,
        holder,
      );
    }
    if (Date.now() - announced > 30_000) {
      options.progress(`${what}; waiting up to ${Math.ceil((deadline - Date.now()) / 1000)}s for it`);
      announced = Date.now();
    }
    await sleep(1000);
  }
}

/**
 * Lets go of the lock if `dir` holds it, unless a live process reserved it for `dir` (then
 * only `reservation: true`, from that reservation's owner, lets go).
 */
export async function releaseMachineLock(
  lockPath: string,
  dir: string,
  options: { reservation?: boolean } = {},
): Promise<void> {
  await withGuard(lockPath, async () => {
    const holder = await readLock(lockPath);
    if (holder?.dir !== dir) return;
    const reserved =
      holder.reservedBy !== undefined &&
      (await sameProcess(holder.reservedBy.pid, holder.reservedBy.pidStart));
    if (!reserved || options.reservation) await rm(lockPath, { force: true });
  });
}
