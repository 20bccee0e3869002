/**
 * Each sample (one per prior design) reaches Ready with the right children, under the
 * operator's own RBAC in a namespace enforcing the restricted Pod Security level; an idle
 * minute afterwards makes zero writes; deleting leaves nothing behind.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { type TestNamespace, waitFor } from "../../harness/cluster.ts";
import {
  applyObjects,
  eventsFor,
  isReady,
  leftovers,
  operatorTestBed,
  podsOf,
  provideVolume,
  type RunningOperator,
  readSample,
  removeTestBed,
  waitForPhase,
} from "./helpers.ts";

// biome-ignore lint/suspicious/noExplicitAny: e2e assertions read arbitrary nested fields of live objects.
type Obj = KubeObject & { spec?: Record<string, any>; status?: Record<string, any> };

describe("samples on the local control plane", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let operator: RunningOperator;
  const volumes: string[] = [];

  before(async () => {
    ({ ns, admin, operator } = await operatorTestBed("e2e-samples"));
  });

  after(() => removeTestBed({ ns, admin, operator }, volumes));

  it("download-then-serve (MLModel operator design): PVC -> Job -> Deployment -> Service, Ready only with ready pods", async () => {
    volumes.push(await provideVolume(admin, ns.name, "resnet-model"));
    await applyObjects(admin, ns.name, readSample("mlmodel-download-then-serve.yaml"));
    const m = await waitForPhase(admin, ns.name, "resnet", "Ready");
    const pods = await podsOf(admin, ns.name, "resnet");
    assert.equal(pods.filter(isReady).length, 2, "Ready is claimed only with 2 ready serving pods");
    assert.equal(m.status?.readyReplicas, 2);
    const job = (await admin.get<Obj>(builtinKinds.Job, {
      namespace: ns.name,
      name: m.status!.download!.job!,
    }))!;
    assert.equal(job.status?.succeeded, 1);
    const container = job.spec!.template.spec.containers[0];
    assert.deepEqual(container.command, ["mlmodel", "download"]);
    assert.equal(container.args[1], "https://models.example.com/resnet/resnet50-savedmodel.tar.gz");
    const pvc = (await admin.get<Obj>(builtinKinds.PersistentVolumeClaim, {
      namespace: ns.name,
      name: "resnet-model",
    }))!;
    assert.equal(pvc.status?.phase, "Bound");
    assert.equal(pvc.spec?.resources.requests.storage, "2Gi");
    const svc = (await admin.get<Obj>(builtinKinds.Service, { namespace: ns.name, name: "resnet" }))!;
    assert.deepEqual(
      svc.spec?.ports.map((p: { name: string; port: number }) => `${p.name}:${p.port}`),
      ["rest:8501", "grpc:8500"],
    );
    assert.equal(m.status?.restURL, `http://resnet.${ns.name}.svc:8501`);
    for (const c of ["Ready", "ModelDownloaded", "ServingReady", "StorageReady"]) {
      assert.equal(m.status?.conditions?.find((x) => x.type === c)?.status, "True", c);
    }
    // Status says every step of a healthy rollout; Events say problems and their end only.
    // The model's own Events (its Deployment, of the same name, has the cluster's).
    const events = await eventsFor(admin, ns.name, "resnet", "MLModel");
    if (!events.some((e) => e.type === "Warning"))
      assert.deepEqual(events, [], "a rollout without a problem records no Event");
  });

  it("TensorFlow Serving operator design: 3 replicas, NodePort rest+grpc, config file and credentials mounted", async () => {
    await applyObjects(admin, ns.name, readSample("tfserving-operator.yaml"));
    const m = await waitForPhase(admin, ns.name, "tfserv-sample", "Ready");
    assert.equal((await podsOf(admin, ns.name, "tfserv-sample")).filter(isReady).length, 3);
    assert.equal(m.status?.readyReplicas, 3);
    const svc = (await admin.get<Obj>(builtinKinds.Service, { namespace: ns.name, name: "tfserv-sample" }))!;
    assert.equal(svc.spec?.type, "NodePort");
    assert.deepEqual(
      svc.spec?.ports.map((p: { name: string; port: number; nodePort?: number }) => [
        p.name,
        p.port,
        p.nodePort! > 0,
      ]),
      [
        ["rest", 8500, true],
        ["grpc", 9000, true],
      ],
    );
    const d = (await admin.get<Obj>(builtinKinds.Deployment, { namespace: ns.name, name: "tfserv-sample" }))!;
    const c = d.spec!.template.spec.containers[0];
    assert.ok(c.args.includes("--model_config_file=$(MODEL_CONFIG_FILE)"));
    const env = Object.fromEntries(c.env.map((e: { name: string; value: string }) => [e.name, e.value]));
    assert.equal(env.GOOGLE_APPLICATION_CREDENTIALS, "/var/run/secrets/mlmodel/credentials/gcp-key.json");
    assert.deepEqual(c.readinessProbe.httpGet.path, "/v1/models/resnet");
  });

  it("MachineModel design: custom image, GPU, autoscaling bounds, gRPC endpoint", async () => {
    await applyObjects(admin, ns.name, readSample("machinemodel.yaml"));
    const m = await waitForPhase(admin, ns.name, "image-classifier-v1", "Ready");
    assert.equal(m.status?.grpcURL, `image-classifier-v1.${ns.name}.svc:9000`);
    assert.equal(m.status?.restURL, undefined, "a gRPC-only model has no REST URL");
    const hpa = (await admin.get<Obj>(builtinKinds.HorizontalPodAutoscaler, {
      namespace: ns.name,
      name: "image-classifier-v1",
    }))!;
    assert.deepEqual([hpa.spec?.minReplicas, hpa.spec?.maxReplicas], [1, 2]);
    const d = (await admin.get<Obj>(builtinKinds.Deployment, {
      namespace: ns.name,
      name: "image-classifier-v1",
    }))!;
    assert.equal(d.spec!.template.spec.containers[0].resources.limits["nvidia.com/gpu"], "1");
    assert.equal((await podsOf(admin, ns.name, "image-classifier-v1")).filter(isReady).length, 1);
  });

  it("makes zero writes over an idle minute after convergence", async () => {
    // Steady state starts once the operator's last writes are behind it (the event recorder
    // writes nothing on its own since it stopped flushing series counts from a timer; status
    // writes follow the pods), so wait for 35 s without a write (bounded: an operator that
    // never goes quiet fails here).
    await waitFor(
      "35 s without an operator write",
      async () => {
        const seen = operator.writes();
        await new Promise((r) => setTimeout(r, 35_000));
        return operator.writes() === seen;
      },
      { timeoutMs: 180_000, intervalMs: 0 },
    );
    const before = operator.writes();
    const requestsBefore = operator.requests.length;
    await new Promise((r) => setTimeout(r, 60_000));
    const writes = operator.writes() - before;
    const all = operator.requests.slice(requestsBefore);
    console.log(
      `# converged with ${before} writes for 3 models; idle minute: ${writes} writes, ${all.length} requests in total (${[...new Set(all.map((r) => r.verb))].join(", ") || "none"})`,
    );
    if (writes > 0) {
      // Name the writes: events that became a series (a repeated transition).
      const events = await admin.list<
        KubeObject & { reason: string; note: string; series?: { count: number } }
      >(builtinKinds.Event, { namespace: ns.name });
      for (const e of events.items.filter((x) => x.series)) {
        console.log(`# event series: ${e.reason} x${e.series?.count}: ${e.note}`);
      }
    }
    assert.equal(writes, 0);
  });

  it("deleting the models leaves nothing behind", async () => {
    for (const name of ["resnet", "tfserv-sample", "image-classifier-v1"]) {
      await admin.delete(
        {
          group: "serving.mlmodel.dev",
          version: "v1alpha1",
          kind: "MLModel",
          plural: "mlmodels",
          namespaced: true,
        },
        { namespace: ns.name, name },
      );
    }
    for (const name of ["resnet", "tfserv-sample", "image-classifier-v1"]) {
      const left = await waitFor(`children of ${name} to be garbage-collected`, async () => {
        const l = await leftovers(admin, ns.name, name);
        return l.length === 0 ? l : undefined;
      });
      assert.deepEqual(left, []);
    }
  });
});
