// Proves the local control plane is a real one: the API server, controller-manager,
// scheduler and kwok each do their part, and the simulated-failure stages work.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  ApiextensionsV1Api,
  AppsV1Api,
  BatchV1Api,
  CustomObjectsApi,
  type V1Pod,
  VersionApi,
} from "@kubernetes/client-node";
import { coreApi, createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";

const kc = kubeConfig();
const core = coreApi(kc);
const apps = kc.makeApiClient(AppsV1Api);
const batch = kc.makeApiClient(BatchV1Api);

const restrictedContainer = (name: string, image: string) => ({
  name,
  image,
  securityContext: {
    allowPrivilegeEscalation: false,
    runAsNonRoot: true,
    runAsUser: 1000,
    capabilities: { drop: ["ALL"] },
    seccompProfile: { type: "RuntimeDefault" },
  },
});

describe("local control plane", () => {
  let ns: TestNamespace;
  before(async () => {
    ns = await createNamespace("smoke", { podSecurity: "restricted" });
  });
  after(async () => {
    await ns.delete();
  });

  it("serves the pinned Kubernetes version", async () => {
    const version = await kc.makeApiClient(VersionApi).getCode();
    assert.match(version.gitVersion, /^v1\.36\.\d+$/);
  });

  it("has Ready kwok nodes, one of them with a GPU", async () => {
    const nodes = (await core.listNode()).items;
    assert.ok(nodes.length >= 1);
    for (const node of nodes) {
      assert.equal(node.metadata?.annotations?.["kwok.x-k8s.io/node"], "fake");
      assert.equal(
        node.status?.conditions?.find((c) => c.type === "Ready")?.status,
        "True",
        node.metadata?.name,
      );
    }
    assert.ok(nodes.some((n) => n.status?.allocatable?.["nvidia.com/gpu"] === "1"));
  });

  it("runs a Deployment to Ready pods on kwok nodes, then garbage-collects them with it", async () => {
    const labels = { app: "web" };
    await apps.createNamespacedDeployment({
      namespace: ns.name,
      body: {
        metadata: { name: "web" },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: { metadata: { labels }, spec: { containers: [restrictedContainer("web", "nginx:1")] } },
        },
      },
    });
    const deployment = await waitFor("deployment web to have 2 ready replicas", async () => {
      const d = await apps.readNamespacedDeployment({ name: "web", namespace: ns.name });
      return d.status?.readyReplicas === 2 ? d : undefined;
    });
    assert.equal(deployment.status?.availableReplicas, 2);
    const pods = (await core.listNamespacedPod({ namespace: ns.name, labelSelector: "app=web" })).items;
    assert.equal(pods.length, 2);
    for (const pod of pods) assert.match(pod.spec?.nodeName ?? "", /^kwok-node-/);

    await apps.deleteNamespacedDeployment({
      name: "web",
      namespace: ns.name,
      propagationPolicy: "Background",
    });
    await waitFor("the garbage collector to delete the pods and replica sets", async () => {
      const [rs, left] = await Promise.all([
        apps.listNamespacedReplicaSet({ namespace: ns.name }),
        core.listNamespacedPod({ namespace: ns.name, labelSelector: "app=web" }),
      ]);
      return rs.items.length === 0 && left.items.length === 0;
    });
  });

  it("completes a Job", async () => {
    await batch.createNamespacedJob({
      namespace: ns.name,
      body: {
        metadata: { name: "once" },
        spec: {
          backoffLimit: 0,
          template: {
            spec: { restartPolicy: "Never", containers: [restrictedContainer("once", "busybox:1")] },
          },
        },
      },
    });
    const job = await waitFor("job once to succeed", async () => {
      const j = await batch.readNamespacedJob({ name: "once", namespace: ns.name });
      return j.status?.succeeded === 1 ? j : undefined;
    });
    assert.ok(job.status?.conditions?.some((c) => c.type === "Complete" && c.status === "True"));
  });

  it("garbage-collects an object whose owner is deleted", async () => {
    const owner = await core.createNamespacedConfigMap({
      namespace: ns.name,
      body: { metadata: { name: "owner" } },
    });
    await core.createNamespacedConfigMap({
      namespace: ns.name,
      body: {
        metadata: {
          name: "dependent",
          ownerReferences: [
            { apiVersion: "v1", kind: "ConfigMap", name: "owner", uid: owner.metadata!.uid! },
          ],
        },
      },
    });
    await core.deleteNamespacedConfigMap({ name: "owner", namespace: ns.name });
    await waitFor("the dependent config map to be collected", async () => {
      const list = await core.listNamespacedConfigMap({ namespace: ns.name });
      return !list.items.some((c) => c.metadata?.name === "dependent");
    });
  });

  it("enforces the restricted Pod Security level", async () => {
    // The API server answers with JSON, so the quotes in its message arrive escaped.
    const violates = (err: Error) =>
      /violates PodSecurity \\?"restricted/.test(String((err as { body?: string }).body));
    const pod = (name: string, securityContext?: object) =>
      core.createNamespacedPod({
        namespace: ns.name,
        body: {
          metadata: { name },
          spec: { containers: [{ name: "c", image: "busybox:1", securityContext }] },
        },
      });
    await assert.rejects(pod("privileged", { privileged: true }), violates);
    await assert.rejects(pod("unhardened"), violates);
    const allowed = await core.createNamespacedPod({
      namespace: ns.name,
      body: { metadata: { name: "hardened" }, spec: { containers: [restrictedContainer("c", "busybox:1")] } },
    });
    assert.equal(allowed.metadata?.name, "hardened");
  });
  it("finishes deleting a namespace", async () => {
    const doomed = await createNamespace("doomed");
    await core.createNamespacedConfigMap({ namespace: doomed.name, body: { metadata: { name: "x" } } });
    await doomed.delete(true);
  });

  it("rejects an object that violates a CRD's OpenAPI schema", async () => {
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    const group = "smoke.mlmodel.dev";
    await ext.createCustomResourceDefinition({
      body: {
        metadata: { name: `widgets.${group}` },
        spec: {
          group,
          scope: "Namespaced",
          names: { plural: "widgets", singular: "widget", kind: "Widget" },
          versions: [
            {
              name: "v1",
              served: true,
              storage: true,
              schema: {
                openAPIV3Schema: {
                  type: "object",
                  properties: {
                    spec: {
                      type: "object",
                      properties: { size: { type: "integer", minimum: 1 } },
                      required: ["size"],
                    },
                  },
                },
              },
            },
          ],
        },
      },
    });
    try {
      const custom = kc.makeApiClient(CustomObjectsApi);
      const create = (spec: unknown) =>
        custom.createNamespacedCustomObject({
          group,
          version: "v1",
          namespace: ns.name,
          plural: "widgets",
          body: { apiVersion: `${group}/v1`, kind: "Widget", metadata: { name: `w${Date.now()}` }, spec },
        });
      await waitFor("the CRD to be served", async () => {
        try {
          await create({ size: 1 });
          return true;
        } catch {
          return false;
        }
      });
      await assert.rejects(create({ size: 0 }), (err: Error) =>
        /spec\.size/.test(String((err as { body?: string }).body)),
      );
      await assert.rejects(create({ size: "big" }), (err: Error) =>
        /spec\.size/.test(String((err as { body?: string }).body)),
      );
    } finally {
      await ext.deleteCustomResourceDefinition({ name: `widgets.${group}` });
    }
  });
});

describe("simulated failures (kwok stages)", () => {
  let ns: TestNamespace;
  before(async () => {
    ns = await createNamespace("stages");
  });
  after(async () => {
    await ns.delete();
  });

  const createPod = (
    name: string,
    image: string,
    annotations: Record<string, string> = {},
    restartPolicy = "Always",
  ) =>
    core.createNamespacedPod({
      namespace: ns.name,
      body: {
        metadata: { name, annotations },
        spec: { restartPolicy, containers: [{ name: "main", image }] },
      },
    });
  const waitPod = (name: string, what: string, check: (pod: V1Pod) => boolean) =>
    waitFor(`pod ${name} ${what}`, async () => {
      const pod = await core.readNamespacedPod({ name, namespace: ns.name });
      return check(pod) ? pod : undefined;
    });

  it("crash-loops a pod marked simulate-crash-loop", async () => {
    await createPod("crash", "example.invalid/simulate-crash-loop:1");
    const pod = await waitPod(
      "crash",
      "in CrashLoopBackOff",
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === "CrashLoopBackOff",
    );
    assert.equal(pod.status?.containerStatuses?.[0]?.ready, false);
    assert.ok((pod.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1);
  });

  it("fails image pulls for a pod annotated image-pull-error", async () => {
    await createPod("pull", "nginx:1", { "stage.mlmodel.dev/simulate": "image-pull-error" });
    const pod = await waitPod(
      "pull",
      "in ImagePullBackOff",
      (p) => p.status?.containerStatuses?.[0]?.state?.waiting?.reason === "ImagePullBackOff",
    );
    assert.equal(pod.status?.phase, "Pending");
  });

  it("keeps a pod marked never-ready running but not Ready", async () => {
    await createPod("slow", "nginx:1", { "stage.mlmodel.dev/simulate": "never-ready" });
    const pod = await waitPod("slow", "running", (p) => p.status?.phase === "Running");
    assert.equal(pod.status?.conditions?.find((c) => c.type === "Ready")?.status, "False");
  });

  it("fails a Job pod with the termination message asked for", async () => {
    await batch.createNamespacedJob({
      namespace: ns.name,
      body: {
        metadata: { name: "fails" },
        spec: {
          backoffLimit: 0,
          template: {
            metadata: {
              annotations: {
                "stage.mlmodel.dev/simulate": "job-failure",
                "stage.mlmodel.dev/message": "s3://models/x: AccessDenied",
              },
            },
            spec: { restartPolicy: "Never", containers: [{ name: "main", image: "busybox:1" }] },
          },
        },
      },
    });
    const job = await waitFor("job fails to fail", async () => {
      const j = await batch.readNamespacedJob({ name: "fails", namespace: ns.name });
      return j.status?.conditions?.some((c) => c.type === "Failed" && c.status === "True") ? j : undefined;
    });
    assert.ok(job);
    const pods = await core.listNamespacedPod({ namespace: ns.name, labelSelector: "job-name=fails" });
    assert.equal(
      pods.items[0]?.status?.containerStatuses?.[0]?.state?.terminated?.message,
      "s3://models/x: AccessDenied",
    );
  });

  it("leaves a pod that asks for more GPUs than any node has Unschedulable (the real scheduler)", async () => {
    await core.createNamespacedPod({
      namespace: ns.name,
      body: {
        metadata: { name: "greedy" },
        spec: {
          containers: [{ name: "main", image: "x", resources: { limits: { "nvidia.com/gpu": "4" } } }],
        },
      },
    });
    const pod = await waitPod("greedy", "unschedulable", (p) =>
      Boolean(p.status?.conditions?.some((c) => c.type === "PodScheduled" && c.reason === "Unschedulable")),
    );
    assert.match(
      pod.status?.conditions?.find((c) => c.type === "PodScheduled")?.message ?? "",
      /nvidia\.com\/gpu/,
    );
  });
});
