// test-needs: own-real-node
// The real node's life on the machine: `down` (after a normal up, after the owner of a test
// cluster is SIGKILLed, after an `up` killed half-way) leaves the machine exactly as it found
// it, and one machine hosts one real node at a time.
//
// Each test reserves the machine's real node first, so that the "before" snapshot is not taken
// while another run's node is up, and the "after" one not once the next run's has started.
// (scripts/test.ts runs this file after the others, once the run's own real node has stopped.)
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  ClusterError,
  type ClusterState,
  down,
  nodePaths,
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

interface OthersOfNodeNames {
  chain: string;
  netns: string;
  link: string;
  remove(): void;
}

/** A KUBE- chain, a cni- netns file and a link of this test's, made before the node starts. */
async function othersOfNodeNames(): Promise<OthersOfNodeNames> {
  const tag = `mltest${process.pid % 100000}`;
  const quietly = (command: string, ...args: string[]) => {
    try {
      execFileSync(command, args, { stdio: "ignore" });
    } catch {}
  };
  const netnsDirExisted = existsSync("/run/netns");
  const others = {
    chain: `KUBE-${tag.toUpperCase()}`,
    netns: `/run/netns/cni-${tag}`,
    // A bridge: the kernel may have no dummy links, and the node needs bridges anyway.
    link: tag,
    remove() {
      quietly("iptables", "-X", others.chain);
      quietly("ip", "link", "del", others.link);
      rmSync(others.netns, { force: true });
      if (!netnsDirExisted) quietly("rmdir", "/run/netns");
    },
  };
  try {
    execFileSync("iptables", ["-N", others.chain], { stdio: "pipe" });
    mkdirSync("/run/netns", { recursive: true });
    writeFileSync(others.netns, "");
    execFileSync("ip", ["link", "add", others.link, "type", "bridge"], { stdio: "pipe" });
  } catch (err) {
    others.remove();
    throw err;
  }
  return others;
}

// Each test is bounded by its own timeout (its wait for the machine's node included), the suite by theirs.
describe("the real node's life on the machine", { timeout: Number.POSITIVE_INFINITY }, () => {
  it(
    "is undone by down: processes, mounts, links, iptables, cgroups, sysctls, host paths; and held alone",
    withNodeWait(15 * 60_000),
    async () => {
      await withReservedNode("rn-cycle", async (dir) => {
        // What is not the node's, named as if it were: a chain and a pod netns that exist before
        // `up`, and a link a forged journal names as the node's bridge.
        const others = await othersOfNodeNames();
        try {
          await cycle(dir, others);
        } finally {
          others.remove();
        }
      });
    },
  );

  async function cycle(dir: string, others: OthersOfNodeNames): Promise<void> {
    const before = snapshotMachine(dir);
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

    // A journal edited to name what is not the node's: down refuses it, says so, and acts on none of it.
    const journalFile = nodePaths(dir).journal;
    const journal = JSON.parse(readFileSync(journalFile, "utf8"));
    journal.bridge = others.link;
    journal.sysctls["kernel.domainname"] = "0";
    writeFileSync(journalFile, JSON.stringify(journal));
    const domainname = readFileSync("/proc/sys/kernel/domainname", "utf8");

    const result = await down(dir);
    assert.equal(result?.leftovers.length, 2, result?.leftovers.join("\n"));
    assert.match(
      result!.leftovers[0]!,
      new RegExp(`names link "${others.link}", but the node only ever makes mlmodel0`),
    );
    assert.match(result!.leftovers[1]!, /sysctl "kernel\.domainname", which the node never changes/);
    assert.equal(readFileSync("/proc/sys/kernel/domainname", "utf8"), domainname);
    // Everything as before: the node's bridge, chains and netns gone, the others' still there.
    await assertMachineAsBefore(dir, before);
    assert.ok(existsSync(others.netns));
  }

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
