// A cluster started for a process that dies by SIGKILL (no `finally` runs) is stopped anyway.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { down, up } from "../../../src/cluster/index.ts";
import { waitFor } from "../../harness/cluster.ts";

/** Pids of processes whose command line mentions `dir`. */
function processesUsing(dir: string): number[] {
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((entry) => {
      try {
        return readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(dir);
      } catch {
        return false; // ended while we looked
      }
    })
    .map(Number);
}

describe("cluster watchdog", () => {
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-watchdog-"));
  after(() => down(dir).catch(() => {}));

  it("stops the cluster once the process it was started for is SIGKILLed", async () => {
    const owner = spawn("sleep", ["600"], { stdio: "ignore" });
    const exited = new Promise((resolve) => owner.once("exit", resolve));
    await up({ dir, nodes: 1, stopWhenGone: owner.pid! });
    // etcd, 4 Kubernetes components and the watchdog all name the dir.
    const running = processesUsing(dir);
    assert.ok(running.length >= 6, `expected the 5 components and the watchdog, found ${running.length}`);

    owner.kill("SIGKILL");
    await exited;
    await waitFor(
      "every process of the cluster to stop",
      async () => processesUsing(dir).length === 0 && !existsSync(join(dir, "state.json")),
      { timeoutMs: 60_000 },
    );
  });
});
