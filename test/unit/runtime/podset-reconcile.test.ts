// The PodSet example's reconciler on the runtime's fake client: no cluster, no kubelet (pods are
// made ready by a status write, as a kubelet would). examples/podset/podset.test.ts runs the same
// controller on the real control plane.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pino from "pino";
import {
  FIELD_MANAGER,
  type Pod,
  type PodSet,
  PodSetKind,
  reconcilePodSet,
  registerPodSet,
} from "../../../examples/podset/podset.ts";
import { builtinKinds, Manager } from "../../../src/runtime/index.ts";
import { FakeClient, fakeReconcileContext } from "../../../src/runtime/testing.ts";

const ns = "apps";
const request = { namespace: ns, name: "web" };
const podSet = (replicas: number): PodSet => ({
  apiVersion: "examples.mlmodel.dev/v1alpha1",
  kind: "PodSet",
  metadata: { name: "web", namespace: ns },
  spec: { replicas, image: "registry.example/web:1" },
});

const podNames = (client: FakeClient) =>
  client
    .objects<Pod>(builtinKinds.Pod, ns)
    .map((p) => p.metadata.name)
    .sort();

async function markReady(client: FakeClient, name: string): Promise<void> {
  await client.patch(
    builtinKinds.Pod,
    { namespace: ns, name },
    { status: { phase: "Running", conditions: [{ type: "Ready", status: "True" }] } },
    "merge",
    { subresource: "status", fieldManager: "kubelet" },
  );
}

describe("PodSet reconcile on the fake client", () => {
  it("creates N owned pods, reports ready ones, scales down, and its pods go with it", async () => {
    const client = new FakeClient();
    await client.create(PodSetKind, podSet(3));
    const reconcile = async () => {
      const ctx = fakeReconcileContext(client, request);
      await reconcilePodSet(ctx);
      return ctx.events.map((e) => e.reason);
    };

    assert.deepEqual(await reconcile(), ["CreatedPod", "CreatedPod", "CreatedPod"]);
    assert.deepEqual(podNames(client), ["web-0", "web-1", "web-2"]);
    const owner = client.peek<PodSet>(PodSetKind, request)!;
    for (const pod of client.objects<Pod>(builtinKinds.Pod, ns)) {
      assert.equal(pod.metadata.ownerReferences?.[0]?.uid, owner.metadata.uid, "controlled by the PodSet");
    }
    // Level-based: the status counts what the cache held, before the pods were created...
    assert.deepEqual(owner.status, { replicas: 0, readyReplicas: 0, observedGeneration: 1 });
    // ...and the next reconcile, once the caches saw the pods, counts them.
    assert.deepEqual(await reconcile(), []);
    assert.deepEqual(client.peek<PodSet>(PodSetKind, request)?.status, {
      replicas: 3,
      readyReplicas: 0,
      observedGeneration: 1,
    });
    assert.deepEqual(client.fieldOwners(PodSetKind, request)[FIELD_MANAGER], [
      ".status.observedGeneration",
      ".status.readyReplicas",
      ".status.replicas",
    ]);

    await markReady(client, "web-0");
    await markReady(client, "web-1");
    assert.deepEqual(await reconcile(), []);
    assert.equal(client.peek<PodSet>(PodSetKind, request)?.status?.readyReplicas, 2);

    await client.patch(PodSetKind, request, { spec: { replicas: 1 } }, "merge");
    assert.deepEqual(await reconcile(), ["DeletedPod", "DeletedPod"]);
    assert.deepEqual(podNames(client), ["web-0"]);
    assert.deepEqual(await reconcile(), []);
    assert.deepEqual(client.peek<PodSet>(PodSetKind, request)?.status, {
      replicas: 1,
      readyReplicas: 1,
      observedGeneration: 2,
    });
    assert.deepEqual(
      client.peek<PodSet>(PodSetKind, request)?.spec,
      podSet(1).spec,
      "status writes leave spec",
    );

    const writes = client.requests.length;
    assert.deepEqual(await reconcile(), []);
    assert.equal(client.requests.length, writes, "nothing to do: no request at all");

    await client.delete(PodSetKind, request);
    assert.deepEqual(podNames(client), [], "garbage collected with their owner");
  });

  it("a cache that has not seen its own creates yet creates no duplicate: the stable name answers 409", async () => {
    const client = new FakeClient();
    await client.create(PodSetKind, podSet(2));
    const stale = fakeReconcileContext(client, request);
    stale.cache(builtinKinds.Pod); // read now: no pods yet
    stale.cache(PodSetKind);
    await reconcilePodSet(fakeReconcileContext(client, request));
    await reconcilePodSet(stale);
    assert.deepEqual(podNames(client), ["web-0", "web-1"]);
    const creates = client.requests.filter((r) => r.verb === "create" && r.kind === "Pod");
    assert.deepEqual(
      creates.map((r) => r.code),
      [201, 201, 409, 409],
    );
    stale.refresh(); // the informers caught up
    await reconcilePodSet(stale);
    const podCreates = client.requests.filter((r) => r.verb === "create" && r.kind === "Pod");
    assert.equal(podCreates.length, 4, "nothing left to create");
  });

  it("an error the API server answers fails the reconcile, to be retried", async () => {
    const client = new FakeClient();
    await client.create(PodSetKind, podSet(1));
    client.failNext({ verb: "create", kind: builtinKinds.Pod }, 500);
    await assert.rejects(reconcilePodSet(fakeReconcileContext(client, request)), /500/);
    await reconcilePodSet(fakeReconcileContext(client, request));
    assert.deepEqual(podNames(client), ["web-0"]);
  });

  it("runs as a controller on a Manager: informers fed by the fake, a deleted pod re-created", async () => {
    const client = new FakeClient();
    const mgr = new Manager({ client, logger: pino({ level: "silent" }) });
    registerPodSet(mgr);
    const ac = new AbortController();
    const running = mgr.start(ac.signal);
    const until = async (what: string, done: () => boolean) => {
      for (let i = 0; i < 3000 && !done(); i++) await new Promise((r) => setTimeout(r, 1));
      assert.ok(done(), what);
    };
    try {
      await client.create(PodSetKind, podSet(2));
      await until("2 pods", () => podNames(client).length === 2);
      await client.delete(builtinKinds.Pod, { namespace: ns, name: "web-1" });
      await until("web-1 re-created", () => podNames(client).includes("web-1"));
      await until("status written", () => client.peek<PodSet>(PodSetKind, request)?.status?.replicas === 2);
      const created = client.requests.filter(
        (r) => r.verb === "create" && r.kind === "Pod" && r.code === 201,
      );
      assert.deepEqual(
        created.map((r) => r.name),
        ["web-0", "web-1", "web-1"],
      );
      await mgr.recorder.flush();
      const reasons = client.objects(builtinKinds.Event, ns).map((e) => e["reason"]);
      assert.ok(
        reasons.includes("CreatedPod"),
        `Events written through the fake: ${JSON.stringify(reasons)}`,
      );
    } finally {
      ac.abort();
      await running;
    }
  });
});
