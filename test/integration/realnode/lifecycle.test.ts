// test-needs: own-real-node
// The real node's life on the machine: `down` (after a normal up, after the owner of a test
// cluster is SIGKILLed, after an `up` killed half-way) leaves the machine exactly as it found
// it, and one machine hosts one real node at a time.
//
// Each test reserves the machine's real node first, so that the "before" snapshot is not taken
// while another run's node is up, and the "after" one not once the next run's has started.
// (scripts/test.ts runs this file after the others, once the run's own real node has stopped.)
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  ClusterError,
  type ClusterState,
  down,
  readState,
  releaseRealNode,
  reserveRealNode,
  status,
  up,
} from "../../../src/cluster/index.ts";
import { readJournal } from "../../../src/cluster/node/node.ts";
import { packageRoot } from "../../../src/cluster/paths.ts";
import { waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { busyboxPod, coreFor, isReady, nodeLockWaitMs, waitForPod, withNodeWait } from "./harness.ts";
import { assertMachineAsBefore, type MachineState, snapshotMachine } from "./machine.ts";

const log = (line: string) => console.log(`# [cluster] ${line}`);

/** Leaves a trace of everything the node does: a pod with a volume, a Service kube-proxy programs. */
async function exercise(state: ClusterState): Promise<void> {
  const core = coreFor(state.kubeconfig);
  const namespace = "default";
  const image = state.realNode!.images.busybox.name;
  await core.createNamespacedPersistentVolumeClaim({
    namespace,
    body: {
      metadata: { name: "data" },
      spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } },
    },
  });
  const script =
    "mkdir -p /www && echo ok > /www/index.html && echo x > /data/x && exec httpd -f -p 8080 -h /www";
  await core.createNamespacedPod({
    namespace,
    body: busyboxPod("web", image, script, {
      labels: { app: "web" },
      restartPolicy: "Always",
      container: {
        readinessProbe: { httpGet: { path: "/", port: 8080 }, periodSeconds: 1 },
        volumeMounts: [{ name: "data", mountPath: "/data" }],
      },
      spec: { volumes: [{ name: "data", persistentVolumeClaim: { claimName: "data" } }] },
    }),
  });
  const service = await core.createNamespacedService({
    namespace,
    body: {
      metadata: { name: "web" },
      spec: { selector: { app: "web" }, ports: [{ port: 80, targetPort: 8080 }] },
    },
  });
  await waitForPod(core, namespace, "web", "Ready", isReady);
  await waitFor("the ClusterIP to answer", async () => {
    const res = await fetch(`http://${service.spec?.clusterIP}/`, {
      signal: AbortSignal.timeout(2000),
    }).catch(() => undefined);
    return res?.ok;
  });
}

/** Runs `body` holding the machine's real node for `dir`, from before `up` to after `down`. */
async function withReservedNode(name: string, body: (dir: string, before: MachineState) => Promise<void>) {
  const dir = scratchDir(name);
  await reserveRealNode(dir, { waitMs: nodeLockWaitMs, progress: log });
  try {
    await body(dir, snapshotMachine(dir));
  } finally {
    await down(dir).catch(() => {});
    await releaseRealNode(dir);
  }
}

// Each test is bounded by its own timeout (its wait for the machine's node included), the suite by theirs.
describe("the real node's life on the machine", { timeout: Number.POSITIVE_INFINITY }, () => {
  it(
    "is undone by down: processes, mounts, links, iptables, cgroups, sysctls, host paths; and held alone",
    withNodeWait(15 * 60_000),
    async () => {
      await withReservedNode("rn-cycle", async (dir, before) => {
        const state = await up({ dir, realNode: true, nodeLockWaitMs, progress: log });
        await exercise(state);
        const during = snapshotMachine(dir);
        // The snapshot does see the node (else "identical after down" would prove nothing).
        for (const part of ["processes", "mounts", "links", "iptables", "cgroups"] as const)
          assert.notDeepEqual(during[part], before[part], `the snapshot's ${part} show the running node`);

        // A second cluster cannot take the machine's node; it says who holds it and starts nothing.
        const second = scratchDir("rn-second");
        await assert.rejects(up({ dir: second, realNode: true }), (err: Error) => {
          assert.ok(err instanceof ClusterError);
          assert.match(err.message, new RegExp(`held by the cluster in ${dir}`));
          assert.match(err.message, /mlmodel cluster down --dir/);
          return true;
        });
        assert.equal(await readState(second), undefined);
        assert.equal(snapshotMachine(second).processes.filter((p) => p.includes(second)).length, 0);
        const health = await status(dir);
        assert.equal(health?.node?.ready, "True", "the first cluster's node is untouched");

        const result = await down(dir);
        assert.deepEqual(result?.leftovers, []);
        await assertMachineAsBefore(dir, before);
      });
    },
  );

  it(
    "is undone by the watchdog when the process it was started for is SIGKILLed",
    withNodeWait(15 * 60_000),
    async () => {
      await withReservedNode("rn-watchdog", async (dir, before) => {
        const owner = spawn("sleep", ["600"], { stdio: "ignore" });
        const exited = new Promise((resolve) => owner.once("exit", resolve));
        const state = await up({
          dir,
          realNode: true,
          nodeLockWaitMs,
          stopWhenGone: owner.pid!,
          progress: log,
        });
        await exercise(state);
        owner.kill("SIGKILL");
        await exited;
        await waitFor("the watchdog to stop the cluster", async () => !existsSync(join(dir, "state.json")), {
          timeoutMs: 120_000,
        });
        await assertMachineAsBefore(dir, before);
      });
    },
  );

  it(
    "is undone by down after an up that was SIGKILLed half-way through starting it",
    withNodeWait(15 * 60_000),
    async () => {
      await withReservedNode("rn-killed", async (dir, before) => {
        const cli = spawn(
          process.execPath,
          [join(packageRoot, "src", "cli", "main.ts"), "cluster", "up", "--real-node", "--dir", dir],
          { stdio: "ignore" },
        );
        const exited = new Promise((resolve) => cli.once("exit", resolve));
        // Killed once kubelet has started: containers, mounts, chains and cgroups are being made.
        await waitFor(
          "the up to start kubelet",
          async () => (await readJournal(dir))?.processes.some((p) => p.component === "kubelet"),
          { timeoutMs: 300_000, intervalMs: 100 },
        );
        cli.kill("SIGKILL");
        await exited;
        assert.equal(await readState(dir), undefined, "the up never finished");
        const result = await down(dir);
        assert.ok(result?.stopped.includes("kube-apiserver"), `stopped ${result?.stopped.join(", ")}`);
        assert.ok(result?.stopped.includes("kubelet"));
        await assertMachineAsBefore(dir, before);
      });
    },
  );
});
