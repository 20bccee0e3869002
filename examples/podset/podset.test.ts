/**
 * The PodSet controller on the real control plane (kwok runs the pods): keeps N pods, heals a
 * deleted pod, scales down, reports ready replicas.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import pino from "pino";
import { parse } from "yaml";
import { builtinKinds, KubeClient, type KubeObject, Manager } from "../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../test/harness/cluster.ts";
import { type PodSet, PodSetKind, registerPodSet } from "./podset.ts";

describe("PodSet controller (real control plane)", () => {
  const client = KubeClient.fromKubeConfig(kubeConfig());
  let ns: TestNamespace;
  const ac = new AbortController();
  let running: Promise<void> | undefined;

  before(async () => {
    const crd = parse(readFileSync(new URL("./crd.yaml", import.meta.url), "utf8")) as KubeObject;
    await client.apply(builtinKinds.CustomResourceDefinition, crd, {
      fieldManager: "podset-test",
      force: true,
    });
    await waitFor("PodSet CRD served", async () => {
      try {
        await client.list(PodSetKind, { limit: 1 });
        return true;
      } catch {
        return false;
      }
    });
    ns = await createNamespace("podset", { podSecurity: "restricted" });
    const mgr = new Manager({
      kubeConfig: kubeConfig(),
      namespaces: [ns.name],
      logger: pino({ level: "silent" }),
    });
    registerPodSet(mgr);
    running = mgr.start(ac.signal);
  });

  after(async () => {
    ac.abort();
    await running;
    await ns.delete();
  });

  const pods = async () =>
    (await client.list(builtinKinds.Pod, { namespace: ns.name })).items.filter(
      (p) => !p.metadata.deletionTimestamp,
    );
  const status = async () =>
    (await client.get<PodSet>(PodSetKind, { namespace: ns.name, name: "web" }))?.status;

  it("creates N pods, reports them ready, heals a deleted pod and scales down", async () => {
    await client.create(PodSetKind, {
      apiVersion: "examples.mlmodel.dev/v1alpha1",
      kind: "PodSet",
      metadata: { name: "web", namespace: ns.name },
      spec: { replicas: 3, image: "registry.example/web:1" },
    });
    await waitFor("3 ready replicas", async () => (await status())?.readyReplicas === 3);
    assert.deepEqual((await pods()).map((p) => p.metadata.name).sort(), ["web-0", "web-1", "web-2"]);

    await client.delete(builtinKinds.Pod, { namespace: ns.name, name: "web-1" }, { gracePeriodSeconds: 0 });
    await waitFor("web-1 re-created and ready", async () => {
      const s = await status();
      const names = (await pods()).map((p) => p.metadata.name);
      return s?.readyReplicas === 3 && names.includes("web-1") ? true : undefined;
    });

    await client.patch(PodSetKind, { namespace: ns.name, name: "web" }, { spec: { replicas: 1 } }, "merge");
    await waitFor("scaled to 1", async () => {
      const s = await status();
      return s?.replicas === 1 && s.readyReplicas === 1 && (await pods()).length === 1;
    });
    assert.equal((await status())?.observedGeneration, 2);
    const events = await client.list(builtinKinds.Event, { namespace: ns.name });
    assert.ok(
      events.items.some((e) => e["reason"] === "CreatedPod"),
      "CreatedPod events recorded",
    );
    assert.ok(
      events.items.some((e) => e["reason"] === "DeletedPod"),
      "DeletedPod events recorded",
    );
  });
});
