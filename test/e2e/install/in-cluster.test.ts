// test-needs: real-node, images, helm
/**
 * The operator as users run it: pods of the project image (imported on the real node), installed
 * by `helm install` of deploy/helm/mlmodel-operator and, separately, by applying dist/install.yaml
 * as `kubectl apply --server-side -f` does (the built-in runtimes second, from
 * deploy/kustomize/runtimes). Each time the operator's pods run on the cluster's real nodes at the
 * restricted Pod Security level as the install's own ServiceAccount, go Ready and serve the MLServer
 * sample (an iris classifier trained in a pod) to the predictions scikit-learn made.
 *
 * High availability, with the chart's two leader-elected replicas: the leader pod is deleted
 * (grace period 0) twice and its process killed (SIGKILL) twice, the model edited at once each
 * time; exactly one new leader takes the Lease (within the lease duration plus one retry period
 * of a delete; of a kill, within a lease duration and two retry periods of the last renewal, as
 * the standby sees that renewal up to one retry period late), a deleted pod writes nothing after
 * its renew deadline (the API server's audit log, by the pod name bound into its token), and the
 * edit is served. Stopping or partitioning the leader's node needs several real nodes.
 *
 * The operators watch only this file's model namespaces: other files of the run share the
 * real-node cluster with operators of their own. For the same reason the chart's copy of the
 * built-in runtimes is off (the cluster-wide ones are shared and outlive this file).
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CoreV1Api, KubeConfig, type V1Node, type V1Pod } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { recipeFor } from "../../../src/images/index.ts";
import {
  type ModelFileServer,
  type SampleModel,
  serviceEndpoint,
  startModelFileServer,
  trainSampleModel,
} from "../../../src/images/sample-model.ts";
import { installKinds } from "../../../src/install/install.ts";
import { defaultOperatorNamespace } from "../../../src/install/manifests.ts";
import { operatorName } from "../../../src/operator/names.ts";
import { leaseName } from "../../../src/operator/run.ts";
import {
  builtinKinds,
  type KubeClient,
  type KubeObject,
  kubeLeaseClient,
  LeaderElector,
} from "../../../src/runtime/index.ts";
import {
  createNamespace,
  kubeConfig,
  localCluster,
  type TestNamespace,
  waitFor,
} from "../../harness/cluster.ts";
import { type RealNodeCluster, useRealNodeCluster } from "../../harness/realnode.ts";
import { adminClient, waitForPhase } from "../operator/helpers.ts";
import { caSecretName, firstAnswer, sklearnModel } from "../realnode/fixture.ts";
import { helm } from "./helm.ts";
import {
  type AuditEvent,
  applyBuiltinRuntimes,
  at,
  auditEvents,
  chartDir,
  podOf,
  podOfIdentity,
  readLease,
  readyManagers,
  succeeded,
} from "./operator-pods.ts";
import { repoRoot } from "./support.ts";

interface Shared {
  cluster: RealNodeCluster;
  admin: KubeClient;
  files: ModelFileServer;
  /** The same model, two archives (different padding, so different checksums): an edit to serve. */
  versions: (SampleModel & { uri: string })[];
}

async function share(trainIn: string): Promise<Shared> {
  const cluster = await useRealNodeCluster();
  const admin = await adminClient();
  const files = await startModelFileServer({ host: cluster.nodeIp });
  try {
    const model = await trainSampleModel(kubeConfig(), { namespace: trainIn });
    const second = await trainSampleModel(kubeConfig(), { namespace: trainIn, paddingBytes: 1000 });
    const versions = [
      { ...model, uri: files.add("iris-a.tgz", model.archive) },
      { ...second, uri: files.add("iris-b.tgz", second.archive) },
    ];
    return { cluster, admin, files, versions };
  } catch (err) {
    await files.stop();
    throw err;
  }
}

async function prepareModelNamespace(shared: Shared, ns: string): Promise<void> {
  await shared.admin.apply(
    builtinKinds.Secret,
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: caSecretName, namespace: ns },
      stringData: { "ca.crt": shared.files.ca },
    },
    { fieldManager: "e2e", force: true },
  );
}

async function applyModel(shared: Shared, ns: string, name: string, version: SampleModel & { uri: string }) {
  const model = sklearnModel(name, version);
  await shared.admin.apply(
    mlModelKind,
    { ...model, metadata: { ...model.metadata, namespace: ns } },
    { fieldManager: "e2e", force: true },
  );
  const applied = await shared.admin.get<MLModel>(mlModelKind, { namespace: ns, name });
  return applied!.metadata.generation!;
}

/** Waits for the model to serve its current spec, and asks it for the sample's predictions. */
async function servedAnswer(shared: Shared, ns: string, name: string, version: SampleModel) {
  const ready = await waitForPhase(shared.admin, ns, name, "Ready", undefined, 600_000);
  const config = new KubeConfig();
  config.loadFromFile(shared.cluster.kubeconfig);
  const endpoint = await serviceEndpoint(config.makeApiClient(CoreV1Api), ready.status!.url!);
  return { ready, answer: await firstAnswer(endpoint, version) };
}

/** Nodes that run pods for real (a container runtime), not kwok's: read from the cluster. */
async function realNodeNames(admin: KubeClient): Promise<string[]> {
  const nodes = (await admin.list(builtinKinds.Node, {})).items as unknown as V1Node[];
  return nodes
    .filter(
      (n) =>
        n.metadata?.annotations?.["kwok.x-k8s.io/node"] !== "fake" &&
        n.status?.nodeInfo?.containerRuntimeVersion?.startsWith("containerd://"),
    )
    .map((n) => n.metadata!.name!);
}

function auditEventsOfCluster(): AuditEvent[] {
  const log = localCluster()?.auditLog;
  assert.ok(log, "the real-node cluster's audit log");
  return auditEvents(log);
}

/** What every install must show: restricted pods of its ServiceAccount on real nodes, Ready, serving the sample. */
async function checkOperatorPods(
  shared: Shared,
  operatorNs: string,
  serviceAccount: string,
  replicas: number,
): Promise<V1Pod[]> {
  const pods = await readyManagers(shared.admin, operatorNs, replicas);
  const nodes = await realNodeNames(shared.admin);
  assert.ok(nodes.length >= 1, "the cluster has a real node");
  const namespace = await shared.admin.get<KubeObject>(builtinKinds.Namespace, { name: operatorNs });
  assert.equal(
    namespace?.metadata.labels?.["pod-security.kubernetes.io/enforce"],
    "restricted",
    "the API server admitted the pods at the restricted level",
  );
  for (const pod of pods) {
    assert.ok(nodes.includes(pod.spec?.nodeName ?? ""), `${pod.metadata?.name} runs on a real node`);
    assert.equal(pod.spec?.serviceAccountName, serviceAccount);
    assert.equal(pod.spec?.containers[0]?.image, recipeFor("mlmodel").ref, "the project image");
    assert.equal(
      pod.status?.containerStatuses?.[0]?.restartCount,
      0,
      `${pod.metadata?.name} never restarted`,
    );
  }
  return pods;
}

/** The operator's writes reached the API server as its ServiceAccount, from its pods. */
function writesOf(serviceAccountUser: string, since: number): AuditEvent[] {
  return auditEventsOfCluster().filter(
    (e) => e.user.username === serviceAccountUser && at(e) >= since && podOf(e) !== undefined,
  );
}

describe("the operator as pods on a real node", () => {
  let shared: Shared;
  let trainNs: TestNamespace;

  before(async () => {
    await useRealNodeCluster();
    trainNs = await createNamespace("ic-train", { podSecurity: "restricted" });
    shared = await share(trainNs.name);
  });
  after(async () => {
    await shared?.files.stop();
    await trainNs?.delete();
  });

  describe("installed by helm install", () => {
    const release = "ic";
    const fullname = `${release}-mlmodel-operator`;
    let operatorNs: TestNamespace;
    let modelsNs: TestNamespace;
    let installedAt: number;

    before(async () => {
      operatorNs = await createNamespace("ic-helm", { podSecurity: "restricted" });
      modelsNs = await createNamespace("ic-helm-models", { podSecurity: "restricted" });
      await prepareModelNamespace(shared, modelsNs.name);
      const [repository, tag] = recipeFor("mlmodel").ref.split(/:(?=[^:/]+$)/);
      installedAt = Date.now();
      const r = helm([
        "install",
        release,
        chartDir,
        "--kubeconfig",
        shared.cluster.kubeconfig,
        "-n",
        operatorNs.name,
        "--set",
        `image.repository=${repository}`,
        "--set",
        `image.tag=${tag}`,
        "--set",
        "builtinRuntimes.enabled=false",
        "--set",
        `watchNamespaces={${modelsNs.name}}`,
      ]);
      assert.equal(r.status, 0, r.stderr);
      await applyBuiltinRuntimes(shared.admin);
    });
    after(async () => {
      if (operatorNs) {
        helm(["uninstall", release, "--kubeconfig", shared.cluster.kubeconfig, "-n", operatorNs.name]);
      }
      await modelsNs?.delete();
      await operatorNs?.delete();
    });

    it("runs two Ready pods at the restricted level as the release's ServiceAccount, on the cluster's real nodes", async () => {
      await checkOperatorPods(shared, operatorNs.name, fullname, 2);
    });

    it("reconciles the sample to the predictions scikit-learn made", async () => {
      const version = shared.versions[0]!;
      await applyModel(shared, modelsNs.name, "iris", version);
      const { answer } = await servedAnswer(shared, modelsNs.name, "iris", version);
      assert.deepEqual(answer.data, version.predictions);
      const user = `system:serviceaccount:${operatorNs.name}:${fullname}`;
      const modelWrites = writesOf(user, installedAt).filter(
        (e) => e.objectRef?.namespace === modelsNs.name && e.objectRef.resource === "mlmodels",
      );
      assert.ok(modelWrites.length > 0, `the model's status was written by ${user} from its pods`);
    });

    it("hands leadership to exactly one new leader when the leader pod is deleted or its process killed, on time, with the edit made meanwhile served", async () => {
      const leases = kubeLeaseClient(shared.admin, operatorNs.name, leaseName);
      // The operator runs with the elector's default timings.
      const timings = new LeaderElector(leases, { name: leaseName, namespace: operatorNs.name });
      const user = `system:serviceaccount:${operatorNs.name}:${fullname}`;
      const bound = timings.leaseDurationMs + timings.retryPeriodMs;
      const figures: string[] = [];
      // "delete": the pod is deleted with grace period 0 (its process gets SIGTERM and releases
      // the Lease). "crash": the leader's process gets SIGKILL (its container restarts in the
      // same pod): the Lease must expire before another replica takes it.
      for (const [run, how] of (["delete", "delete", "crash", "crash"] as const).entries()) {
        const pods = await readyManagers(shared.admin, operatorNs.name, 2);
        const before = await readLease(shared.admin, operatorNs.name);
        assert.equal(before.spec.leaseDurationSeconds * 1000, timings.leaseDurationMs);
        const oldIdentity = before.spec.holderIdentity;
        const oldLeader = podOfIdentity(oldIdentity);
        const killedAt = Date.now();
        if (how === "delete") {
          await shared.admin.delete(
            builtinKinds.Pod,
            { namespace: operatorNs.name, name: oldLeader },
            { gracePeriodSeconds: 0 },
          );
        } else {
          const uid = pods.find((p) => p.metadata?.name === oldLeader)?.metadata?.uid;
          assert.ok(uid, `the leader ${oldLeader} is one of the Ready pods`);
          const pids = operatorProcesses(uid);
          assert.ok(pids.length > 0, `the operator's process of pod ${oldLeader} on this machine`);
          for (const pid of pids) process.kill(pid, "SIGKILL");
        }
        // Edited during the handover: the other archive of the same model.
        const version = shared.versions[(run + 1) % 2]!;
        const generation = await applyModel(shared, modelsNs.name, "iris", version);
        let lastRenew = Date.parse(before.spec.renewTime);
        const after = await waitFor(
          `a new leader after ${oldIdentity}`,
          async () => {
            const lease = await readLease(shared.admin, operatorNs.name, false);
            const holder = lease.spec.holderIdentity;
            if (holder === oldIdentity) lastRenew = Date.parse(lease.spec.renewTime);
            return holder && holder !== oldIdentity ? lease : undefined;
          },
          { timeoutMs: 120_000, intervalMs: 100 },
        );
        const newLeader = podOfIdentity(after.spec.holderIdentity);
        // The new leader's own clock stamps acquireTime: no polling delay in the figures.
        const acquiredAt = Date.parse(after.spec.acquireTime);

        const { ready, answer } = await servedAnswer(shared, modelsNs.name, "iris", version);
        assert.equal(ready.status?.observedGeneration, generation, "the edit made during the handover");
        assert.deepEqual(answer.data, version.predictions);
        assert.ok(
          (shared.files.requests.get(new URL(version.uri).pathname) ?? 0) >= 1,
          "the edited archive was fetched",
        );
        const still = await readLease(shared.admin, operatorNs.name);
        assert.equal(
          still.spec.holderIdentity,
          after.spec.holderIdentity,
          "leadership stayed with the new leader",
        );

        const events = writesOf(user, killedAt).filter(
          (e) => e.objectRef?.resource === "leases" && succeeded(e),
        );
        // The old leader's renewals up to its end (and a deleted pod's release) are not a second
        // leader; its pod counts only when its restarted process is the new leader.
        const acquirers = new Set(events.map(podOf).filter((pod) => pod !== oldLeader || pod === newLeader));
        assert.deepEqual([...acquirers], [newLeader], "exactly one pod took and kept the Lease");
        if (how === "delete") {
          const oldWrites = auditEventsOfCluster().filter(
            (e) => e.user.username === user && podOf(e) === oldLeader,
          );
          const renewed = oldWrites.filter((e) => e.objectRef?.resource === "leases" && succeeded(e)).map(at);
          const late = oldWrites.filter((e) => at(e) > Math.max(...renewed) + timings.renewDeadlineMs);
          assert.deepEqual(late, [], `writes from ${oldLeader} after its renew deadline`);
          // Released at once: a new leader within the bound from the kill.
          assert.ok((acquiredAt - killedAt) / bound <= 1, `${acquiredAt - killedAt} ms after the kill`);
        } else {
          // The standby sees the last renewal up to one retry period late and retries every
          // retry period: from the last renewal, at most a lease duration and two retry periods.
          assert.ok(
            (acquiredAt - lastRenew) / (bound + timings.retryPeriodMs) <= 1,
            `${acquiredAt - lastRenew} ms after the last renewal`,
          );
        }
        figures.push(
          `${how}: ${oldLeader} -> ${newLeader}: ${acquiredAt - killedAt} ms after the kill, ${acquiredAt - lastRenew} ms after the last renewal`,
        );
        console.log(
          `# handover ${run + 1} (${figures.at(-1)}; lease ${timings.leaseDurationMs} + retry ${timings.retryPeriodMs} ms)`,
        );
      }
    });
  });

  describe("installed by applying dist/install.yaml, as kubectl apply --server-side -f does", () => {
    const namespace = defaultOperatorNamespace;
    let modelsNs: TestNamespace;
    let applied: KubeObject[] = [];

    before(async () => {
      modelsNs = await createNamespace("ic-dist-models", { podSecurity: "restricted" });
      await prepareModelNamespace(shared, modelsNs.name);
      const objects = parseAllDocuments(readFileSync(join(repoRoot, "dist/install.yaml"), "utf8")).map(
        (d) => d.toJS() as KubeObject,
      );
      for (const obj of objects) {
        const kind = installKinds[obj.kind];
        assert.ok(kind, `dist/install.yaml has a ${obj.kind}`);
        await shared.admin.apply(kind, watchOnly(obj, modelsNs.name), {
          fieldManager: "kubectl",
          force: true,
        });
      }
      applied = objects.filter((o) => ["Deployment", "Service", "PodDisruptionBudget"].includes(o.kind));
      await applyBuiltinRuntimes(shared.admin);
    });
    after(async () => {
      // The namespace, the ServiceAccount and the RBAC are the shared install's: left as they are.
      for (const obj of applied) {
        await shared.admin
          .delete(installKinds[obj.kind]!, { namespace: obj.metadata.namespace!, name: obj.metadata.name! })
          .catch(() => {});
      }
      await modelsNs?.delete();
    });

    it("runs two Ready pods at the restricted level as its ServiceAccount, on the cluster's real nodes", async () => {
      await checkOperatorPods(shared, namespace, operatorName, 2);
    });

    it("reconciles the sample to the predictions scikit-learn made", async () => {
      const startedAt = Date.now();
      const version = shared.versions[0]!;
      await applyModel(shared, modelsNs.name, "iris", version);
      const { answer } = await servedAnswer(shared, modelsNs.name, "iris", version);
      assert.deepEqual(answer.data, version.predictions);
      const user = `system:serviceaccount:${namespace}:${operatorName}`;
      assert.ok(
        writesOf(user, startedAt).some(
          (e) => e.objectRef?.namespace === modelsNs.name && e.objectRef.resource === "mlmodels",
        ),
        `the model's status was written by ${user} from its pods`,
      );
    });
  });
});

/** The Deployment of dist/install.yaml, watching only `namespace` (the run's other operators own the rest). */
function watchOnly(obj: KubeObject, namespace: string): KubeObject {
  if (obj.kind !== "Deployment") return obj;
  // biome-ignore lint/suspicious/noExplicitAny: a literal Deployment from the file.
  const copy = structuredClone(obj) as any;
  copy.spec.template.spec.containers[0].args.push(`--namespace=${namespace}`);
  return copy;
}

/**
 * The host processes of a pod's operator container: the real node runs on this machine, and a
 * process's cgroup path names its pod's UID (with '_' for '-' under the systemd driver).
 */
function operatorProcesses(podUid: string): number[] {
  const forms = [podUid, podUid.replaceAll("-", "_")];
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!forms.some((form) => readFileSync(`/proc/${entry}/cgroup`, "utf8").includes(form))) continue;
      const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
      if (argv.includes("operator") && argv.includes("--leader-elect")) pids.push(Number(entry));
    } catch {
      // The process ended while being read.
    }
  }
  return pids;
}
