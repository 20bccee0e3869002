// test-needs: own-real-node
// Several real nodes and the machine: an `up --real-nodes 3` SIGKILLed half-way (kubelets
// starting in their namespaces) is undone by `down` from the journal alone, to the snapshot
// taken before; and while it holds the machine, no other real-node cluster starts.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  ClusterError,
  down,
  readFleetJournal,
  readState,
  releaseRealNode,
  reserveRealNode,
  up,
} from "../../../src/cluster/index.ts";
import { packageRoot } from "../../../src/cluster/paths.ts";
import { waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { nodeLockWaitMs, withNodeWait } from "../../integration/realnode/harness.ts";
import { assertMachineAsBefore, snapshotMachine } from "../../integration/realnode/machine.ts";

const log = (line: string) => console.log(`# [cluster] ${line}`);

describe("several real nodes' life on the machine", { timeout: Number.POSITIVE_INFINITY }, () => {
  it(
    "is undone by down after an up --real-nodes 3 SIGKILLed half-way; nobody else takes the machine meanwhile",
    withNodeWait(15 * 60_000),
    async () => {
      const dir = scratchDir("multinode-killed");
      await reserveRealNode(dir, { waitMs: nodeLockWaitMs, progress: log });
      try {
        const before = snapshotMachine(dir);
        const cli = spawn(
          process.execPath,
          [join(packageRoot, "src", "cli", "main.ts"), "cluster", "up", "--real-nodes", "3", "--dir", dir],
          { stdio: "ignore" },
        );
        const exited = new Promise((resolve) => cli.once("exit", resolve));
        // Killed once every node's kubelet has started: namespaces, veths, routes, containers,
        // mounts and cgroups are being made.
        await waitFor(
          "the up to start every node's kubelet",
          async () =>
            (await readFleetJournal(dir))?.members.every((m) =>
              m.processes.some((p) => p.component === "kubelet"),
            ),
          { timeoutMs: 300_000, intervalMs: 100 },
        );
        cli.kill("SIGKILL");
        await exited;
        assert.equal(await readState(dir), undefined, "the up never finished");
        const second = scratchDir("multinode-second");
        await assert.rejects(up({ dir: second, realNodes: 2 }), (err: Error) => {
          assert.ok(err instanceof ClusterError);
          assert.match(err.message, new RegExp(`held by the cluster in ${dir}`));
          return true;
        });
        assert.equal(await readState(second), undefined);
        const during = snapshotMachine(dir);
        for (const part of ["processes", "links", "routes", "cgroups"] as const)
          assert.notDeepEqual(
            during[part],
            before[part],
            `the snapshot's ${part} show the half-started nodes`,
          );
        const result = await down(dir);
        assert.ok(result?.stopped.includes("kube-apiserver"), `stopped ${result?.stopped.join(", ")}`);
        assert.equal(result?.stopped.filter((c) => c === "kubelet").length, 3, "three kubelets stopped");
        assert.deepEqual(result?.leftovers, []);
        await assertMachineAsBefore(dir, before);
      } finally {
        await down(dir).catch(() => {});
        await releaseRealNode(dir);
      }
    },
  );
});
