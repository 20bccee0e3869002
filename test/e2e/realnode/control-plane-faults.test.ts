// test-needs: own-real-node, images
/**
 * The data plane does not need the control plane: the sample model on 2 MLServer replicas
 * serves 25 requests a second through its Service (a new connection each, balanced by
 * kube-proxy's rules) while, one after the other, the node's kubelet, containerd and kube-proxy
 * are restarted, etcd is restarted, the operator (a process of its own) is SIGKILLed and
 * started again, and the API server is down for 60 s (the controller manager, leader-elected,
 * exits during it and its supervisor starts it again, as on a standard control plane:
 * docs/data-plane.md). For each fault:
 * - no request fails from the fault's start until 30 s of answers after the recovery (counts
 *   only; docs/data-plane.md gives the figures and why each holds);
 * - no serving pod is replaced or restarted (the same UIDs, the same restart counts);
 * - once the component is back (and the Node Ready), the model's status is correct again:
 *   Ready, 2 of 2 replicas ready, of its generation.
 * The restarts are src/cluster's restartComponent, which keeps the node's journal in step so
 * that the teardown stops the new processes.
 *
 * The file starts a real-node cluster of its own (own-real-node: such files run alone, after
 * the others): an etcd restart and a 60 s API server outage would fail the API calls of any
 * other file sharing the run's cluster.
 */
import assert from "node:assert/strict";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CoreV1Api, DiscoveryV1Api, KubeConfig } from "@kubernetes/client-node";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { restartComponent } from "../../../src/cluster/index.ts";
import { readNode, readyCondition } from "../../../src/cluster/node/node.ts";
import { inferV2, type SampleModel, type ServiceEndpoint } from "../../../src/images/sample-model.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import type { OperatorProcess } from "../../chaos/operator-process.ts";
import { waitFor } from "../../harness/cluster.ts";
import { startOwnRealNodes, stopOwnRealNodes } from "../../harness/realnode.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { Traffic, versionClassifier } from "../../harness/traffic.ts";
import { getModel, podsOf } from "../operator/helpers.ts";
import {
  applyCaSecret,
  applyModel,
  endpointOf,
  firstAnswer,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  removeRealNodeBed,
  sklearnModel,
  startOperatorProcess,
  waitForModel,
} from "./fixture.ts";
import {
  assertNoFailures,
  burnersForTraffic,
  holdNodeForTraffic,
  liveTrafficHook,
  liveTrafficSuiteTimeoutMs,
  moreAnswers,
} from "./live-traffic.ts";

const name = "iris";
const replicas = 2;
const ratePerSecond = 25;
const maxDurationMs = 30 * 60_000;
const maxRequests = ratePerSecond * (maxDurationMs / 1000);
/** How long the API server stays down. */
const apiServerDowntimeMs = 60_000;
/** Recovery is awaited, not timed: this only bounds a wait that would otherwise never end. */
const recoveryBoundMs = 300_000;
/**
 * Answers counted after the recovery before a fault's window closes: 30 s of traffic, which
 * covers what a restarted kubelet does late (readiness probes every 5 s after a random delay,
 * node status every 10 s) and kube-proxy's periodic resync.
 */
const answersAfterRecovery = ratePerSecond * 30;

type PodLike = Awaited<ReturnType<typeof podsOf>>[number] & {
  status?: { containerStatuses?: { name: string; restartCount: number; ready: boolean }[] };
};

/** Each serving pod's UID with its containers' restart counts: what a replaced or restarted pod changes. */
async function servingPods(bed: RealNodeBed): Promise<Record<string, Record<string, number>>> {
  const pods = (await podsOf(bed.admin, bed.ns.name, name)) as PodLike[];
  return Object.fromEntries(
    pods.map((p) => [
      `${p.metadata.name} ${p.metadata.uid}`,
      Object.fromEntries((p.status?.containerStatuses ?? []).map((c) => [c.name, c.restartCount])),
    ]),
  );
}

const statusCorrect = (m: MLModel) => {
  const s = m.status;
  return (
    s?.phase === "Ready" &&
    s.observedGeneration === m.metadata.generation &&
    s.replicas === replicas &&
    s.readyReplicas === replicas
  );
};

/**
 * What the control plane said during a fault, polled once a second, as runs of distinct values:
 * the model's phase and ready replicas ("Ready 2/2"), the ready endpoints the Service's
 * EndpointSlices list ("endpoints 2"; fewer would take a pod out of kube-proxy's rules), the
 * Node's Ready condition, or "unreachable" while the API server does not answer. For the log
 * and the docs.
 */
function pollStatus(bed: RealNodeBed, core: CoreV1Api, node: string, service: string) {
  const discovery = kubeConfigOf(bed).makeApiClient(DiscoveryV1Api);
  const seen: string[] = [];
  let stopped = false;
  const read = async () => {
    const model = await getModel(bed.admin, bed.ns.name, name);
    const nodeReady = readyCondition(await readNode(core, node));
    const slices = await discovery.listNamespacedEndpointSlice({
      namespace: bed.ns.name,
      labelSelector: `kubernetes.io/service-name=${service}`,
    });
    const ready = slices.items.flatMap((e) => e.endpoints).filter((e) => e?.conditions?.ready).length;
    return `${model?.status?.phase} ${model?.status?.readyReplicas ?? 0}/${model?.status?.replicas ?? 0}, endpoints ${ready}, node ${nodeReady?.status}`;
  };
  const loop = (async () => {
    while (!stopped) {
      const value = await read().catch(() => "unreachable");
      if (seen.at(-1) !== value) seen.push(value);
      await new Promise((r) => setTimeout(r, 1000));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return seen;
    },
  };
}

/** A log file's text written since logSince was called. */
function logSince(file: string) {
  const from = statSync(file, { throwIfNoEntry: false })?.size ?? 0;
  return { text: () => readFileSync(file, "utf8").slice(from) };
}

/**
 * What the controller manager logged about the node's health during a fault (it marks the Node
 * Unknown and its pods not ready when the kubelet's lease looks expired): the lines written
 * since nodeLifecycleLog was called that say so, at most 8.
 */
function nodeLifecycleLog(dir: string) {
  const log = logSince(join(dir, "logs", "kube-controller-manager.log"));
  return {
    since(): string[] {
      return log
        .text()
        .split("\n")
        .filter(
          (line) =>
            !line.includes("FLAG:") &&
            /node_lifecycle|NodeNotReady|MarkPodsNotReady|not ready|Unknown/i.test(line),
        )
        .slice(-8)
        .map((line) => line.slice(0, 300));
    },
  };
}

function kubeConfigOf(bed: RealNodeBed): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(bed.cluster.kubeconfig);
  return kc;
}

/** The node's Lease renewal time: the kubelet renews it every 10 s while it reaches the API server. */
async function leaseRenewedAt(bed: RealNodeBed, node: string): Promise<number> {
  const lease = await bed.admin.get<KubeObject & { spec?: { renewTime?: string } }>(builtinKinds.Lease, {
    namespace: "kube-node-lease",
    name: node,
  });
  return lease?.spec?.renewTime ? Date.parse(lease.spec.renewTime) : 0;
}

describe("the data plane through control-plane faults on a real node", {
  timeout: liveTrafficSuiteTimeoutMs,
}, () => {
  let bed: RealNodeBed;
  let v1: SampleModel & { uri: string };
  let endpoint: ServiceEndpoint;
  let releaseNode: (() => Promise<void>) | undefined;
  let traffic: Traffic<Awaited<ReturnType<typeof inferV2>>>;
  let burners: ReturnType<typeof burnersForTraffic>;
  let operator: OperatorProcess | undefined;
  let core: CoreV1Api;
  let pods: Record<string, Record<string, number>>;
  let service: string;
  const operatorDir = scratchDir("faults-operator");
  const figures: Record<string, unknown>[] = [];

  const startOperator = () => startOperatorProcess(bed, operatorDir);

  /**
   * Runs `fault` under the traffic and judges its window: from the fault's start until the node
   * is Ready with its lease renewed, the model's status correct again and 30 s more of answers
   * are in.
   */
  async function underTraffic(fault: string, inject: () => Promise<void>): Promise<void> {
    const node = bed.cluster.state.realNode!.nodeName;
    const polled = pollStatus(bed, core, node, service);
    const logs = nodeLifecycleLog(bed.cluster.dir);
    const startedAt = Date.now();
    traffic.mark(`${fault} start`);
    await inject();
    traffic.mark(`${fault} back`);
    // A kubelet that renewed its lease since the fault began reaches the API server again.
    await waitFor(
      `node ${node} Ready, its lease renewed, after ${fault}`,
      async () =>
        readyCondition(await readNode(core, node))?.status === "True" &&
        (await leaseRenewedAt(bed, node)) >= startedAt - 1000,
      { timeoutMs: recoveryBoundMs },
    );
    const recovered = await waitForModel(
      bed,
      name,
      `Ready with ${replicas}/${replicas} replicas after ${fault}`,
      statusCorrect,
      recoveryBoundMs,
    );
    traffic.mark(`${fault} recovered`);
    await moreAnswers(traffic, answersAfterRecovery, `serving after ${fault}`);
    traffic.mark(`${fault} end`);
    const report = traffic.report(`${fault} start`, `${fault} end`);
    const seconds = (from: string, to: string) =>
      Math.round((traffic.markAt(to) - traffic.markAt(from)) / 100) / 10;
    const figure = {
      fault,
      sent: report.sent,
      failed: report.failed,
      faultSeconds: seconds(`${fault} start`, `${fault} back`),
      statusCorrectAfterSeconds: seconds(`${fault} back`, `${fault} recovered`),
      windowSeconds: seconds(`${fault} start`, `${fault} end`),
      latencyMs: report.latencyMs,
      status: await polled.stop(),
      nodeLifecycle: logs.since(),
    };
    figures.push(figure);
    console.log(`# ${JSON.stringify(figure)}`);
    assertNoFailures(report, fault);
    assert.ok(statusCorrect(recovered), JSON.stringify(recovered.status));
    assert.deepEqual(
      await servingPods(bed),
      pods,
      `the serving pods after ${fault}: none replaced or restarted`,
    );
  }

  const clusterDir = scratchDir("cp-faults");

  before(async () => {
    const progress = (line: string) => console.log(`# [cluster] ${line}`);
    await startOwnRealNodes(clusterDir, 1, progress);
    bed = await realNodeBed("rn-faults");
    // The bed's in-process operator gives way to a process that can be SIGKILLed.
    await bed.operator.stop();
    operator = await startOperator();
    core = kubeConfigOf(bed).makeApiClient(CoreV1Api);
    releaseNode = await holdNodeForTraffic(bed.cluster, "control-plane-faults.test.ts");
    v1 = await publishSample(bed, "iris-v1.tgz", { version: 1 });
    await applyCaSecret(bed);
    await applyModel(bed, sklearnModel(name, v1, { replicas }));
    const ready = await waitForModel(bed, name, `Ready with ${replicas} replicas`, statusCorrect);
    endpoint = await endpointOf(bed, ready);
    service = new URL(ready.status!.url!).hostname.split(".")[0]!;
    assert.deepEqual((await firstAnswer(endpoint, v1)).data, v1.predictions);
    pods = await servingPods(bed);
    assert.equal(Object.keys(pods).length, replicas, JSON.stringify(pods));
    traffic = new Traffic({
      send: () => inferV2(endpoint, name, v1.inputs),
      judge: versionClassifier({ v1: v1.predictions }),
      ratePerSecond,
      maxRequests,
      maxDurationMs,
    }).start();
    burners = burnersForTraffic("control-plane-faults.test.ts", maxDurationMs);
    await moreAnswers(traffic, ratePerSecond * 3, "serving before the faults");
  }, liveTrafficHook);

  after(async () => {
    try {
      console.log(`# control-plane faults: ${JSON.stringify(figures)}`);
      await burners?.stop();
      await traffic?.stop();
      await operator?.kill("SIGKILL");
      await removeRealNodeBed(bed);
    } finally {
      await releaseNode?.();
      await stopOwnRealNodes(clusterDir);
    }
  });

  it("kubelet restarted: no request fails, no pod restarts", async () => {
    await underTraffic("kubelet restart", async () => {
      await restartComponent(bed.cluster.dir, "kubelet");
    });
  });

  it("containerd restarted: no request fails, no pod restarts", async () => {
    await underTraffic("containerd restart", async () => {
      await restartComponent(bed.cluster.dir, "containerd");
    });
  });

  it("kube-proxy restarted: no request fails, no pod restarts", async () => {
    await underTraffic("kube-proxy restart", async () => {
      await restartComponent(bed.cluster.dir, "kube-proxy");
    });
  });

  it("etcd restarted: no request fails, no pod restarts", async () => {
    await underTraffic("etcd restart", async () => {
      await restartComponent(bed.cluster.dir, "etcd", { timeoutMs: recoveryBoundMs });
    });
  });

  it("the operator SIGKILLed and started again: no request fails, no pod restarts", async () => {
    await underTraffic("operator SIGKILL", async () => {
      await operator!.kill("SIGKILL");
      assert.equal(operator!.exitStatus?.signal, "SIGKILL");
      // No operator for 5 s of traffic: the pods serve on their own.
      await moreAnswers(traffic, ratePerSecond * 5, "no operator running");
      operator = await startOperator();
    });
  });

  it("the API server down for 60 s: no request fails, the controller manager is started again by its supervisor", async () => {
    const controllerManagerLog = logSince(join(bed.cluster.dir, "logs", "kube-controller-manager.log"));
    await underTraffic("API server down 60 s", async () => {
      await restartComponent(bed.cluster.dir, "kube-apiserver", {
        downtimeMs: apiServerDowntimeMs,
        timeoutMs: recoveryBoundMs,
      });
    });
    // The zero failures rest on this, not on timing: the leader-elected controller manager
    // lost its lease during the outage, exited, and a new one judged the node afresh.
    assert.match(
      controllerManagerLog.text(),
      /supervise: kube-controller-manager exited/,
      "the controller manager was not restarted during the outage",
    );
  });
});
