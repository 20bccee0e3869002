/**
 * Stops a local control plane once the process that started it is gone.
 *
 * A test run or benchmark stops its cluster in a `finally`, but SIGKILL (a CI timeout, an OOM
 * kill, a closed terminal) skips every `finally`: the five components, started detached so
 * they outlive a restart of the tool, would then run until the machine reboots. `up` with
 * `stopWhenGone: pid` starts this script detached beside the cluster; it checks every two
 * seconds and runs `down` when that process has exited. It exits on its own once the cluster
 * is stopped normally (its state file is gone).
 *
 * Usage (internal): node watchdog.ts DIR PID
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { isAlive } from "./binaries.ts";
import { down } from "./cluster.ts";

const pollMs = 2000;

/** Waits until the owner is gone (then stops the cluster) or the cluster is (then returns). */
export async function watch(dir: string, ownerPid: number): Promise<"stopped" | "already-down"> {
  for (;;) {
    if (!existsSync(join(dir, "state.json"))) return "already-down";
    if (!isAlive(ownerPid)) {
      await down(dir);
      return "stopped";
    }
    await sleep(pollMs);
  }
}

if (import.meta.main) {
  const [dir, pid] = process.argv.slice(2);
  if (!dir || !pid || !/^\d+$/.test(pid)) {
    console.error("usage: node watchdog.ts DIR PID");
    process.exit(2);
  }
  await watch(dir, Number(pid));
}
