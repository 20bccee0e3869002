// test-needs: real-node, images
/**
 * The data plane does not need the control plane: the sample model on 2 MLServer replicas
 * serves 25 requests a second through its Service (a new connection each, balanced by
 * kube-proxy's rules) while, one after the other, the node's kubelet, containerd and kube-proxy
 * are restarted, the API server is down for 60 s, etcd is restarted, and the operator (a
 * process of its own) is SIGKILLed and started again. For each fault:
 * - no request fails (counts only; docs/data-plane.md gives the figures and why each holds);
 * - no serving pod is replaced or restarted (the same UIDs, the same restart counts);
 * - once the component is back (and the Node Ready), the model's status is correct again:
 *   Ready, 2 of 2 replicas ready, of its generation.
 * The restarts are src/cluster's restartComponent, which keeps the node's journal in step so
 * that the run's teardown stops the new processes.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { restartComponent } from "../../../src/cluster/index.ts";
import { readNode, readyCondition } from "../../../src/cluster/node/node.ts";
import { recipeFor } from "../../../src/images/index.ts";
import { inferV2, type SampleModel, type ServiceEndpoint } from "../../../src/images/sample-model.ts";
import { OperatorProcess, operatorKubeconfig, waitReady } from "../../chaos/operator-process.ts";
import { kubeConfig, waitFor } from "../../harness/cluster.ts";
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
 * The model's phase and ready replicas as a poll sees them once a second, as runs of distinct
 * values ("Ready 2/2", "Deploying 1/2", "unreachable": the API server did not answer): what
 * status said during a fault, for the log and the docs.
 */
function pollStatus(bed: RealNodeBed) {
  const seen: string[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const value = await getModel(bed.admin, bed.ns.name, name).then(
        (m) => `${m?.status?.phase} ${m?.status?.readyReplicas ?? 0}/${m?.status?.replicas ?? 0}`,
        () => "unreachable",
      );
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
  const operatorDir = scratchDir("faults-operator");
  const figures: Record<string, unknown>[] = [];

  async function startOperator(): Promise<OperatorProcess> {
    const op = await OperatorProcess.start({
      kubeconfig: await operatorKubeconfig(bed.admin, kubeConfig(), operatorDir),
      namespace: bed.ns.name,
      logFile: join(operatorDir, "operator.log"),
      downloaderImage: recipeFor("mlmodel").ref,
    });
    await waitReady(op);
    return op;
  }

  /**
   * Runs `fault` under the traffic and judges its window: from the fault's start until the node
   * is Ready, the model's status correct again and 3 s more of answers are in.
   */
  async function underTraffic(fault: string, inject: () => Promise<void>): Promise<void> {
    const polled = pollStatus(bed);
    traffic.mark(`${fault} start`);
    await inject();
    traffic.mark(`${fault} back`);
    const node = bed.cluster.state.realNode!.nodeName;
    await waitFor(
      `node ${node} Ready after ${fault}`,
      async () => {
        return readyCondition(await readNode(core, node))?.status === "True";
      },
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
    await moreAnswers(traffic, ratePerSecond * 3, `serving after ${fault}`);
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

  before(async () => {
    bed = await realNodeBed("rn-faults");
    // The bed's in-process operator gives way to a process that can be SIGKILLed.
    await bed.operator.stop();
    operator = await startOperator();
    const kc = new KubeConfig();
    kc.loadFromFile(bed.cluster.kubeconfig);
    core = kc.makeApiClient(CoreV1Api);
    releaseNode = await holdNodeForTraffic(bed.cluster, "control-plane-faults.test.ts");
    v1 = await publishSample(bed, "iris-v1.tgz", { version: 1 });
    await applyCaSecret(bed);
    await applyModel(bed, sklearnModel(name, v1, { replicas }));
    const ready = await waitForModel(bed, name, `Ready with ${replicas} replicas`, statusCorrect);
    endpoint = await endpointOf(bed, ready);
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

  it("the API server down for 60 s: no request fails, no pod restarts", async () => {
    await underTraffic("API server down 60 s", async () => {
      await restartComponent(bed.cluster.dir, "kube-apiserver", {
        downtimeMs: apiServerDowntimeMs,
        timeoutMs: recoveryBoundMs,
      });
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
});
