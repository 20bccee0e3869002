import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type Pod, type PodSet, plan, podFor } from "../../../examples/podset/podset.ts";

const ps = (replicas: number): PodSet => ({
  apiVersion: "examples.mlmodel.dev/v1alpha1",
  kind: "PodSet",
  metadata: { namespace: "ns", name: "web", uid: "u1", generation: 3 },
  spec: { replicas, image: "nginx" },
});
const pod = (name: string, ready = false, terminating = false): Pod => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: { namespace: "ns", name, ...(terminating ? { deletionTimestamp: "2026-01-01T00:00:00Z" } : {}) },
  status: { conditions: [{ type: "Ready", status: ready ? "True" : "False" }] },
});

describe("PodSet plan", () => {
  it("creates the missing stable names, deletes extras, counts ready pods", () => {
    const p = plan(ps(3), [pod("web-0", true), pod("web-2"), pod("web-7", true), pod("web-1", false, true)]);
    assert.deepEqual(p.create, ["web-1"], "a terminating pod does not count; its name is re-created");
    assert.deepEqual(p.delete, ["web-7"]);
    assert.deepEqual(p.status, { replicas: 3, readyReplicas: 2, observedGeneration: 3 });
  });

  it("scales to zero", () => {
    assert.deepEqual(plan(ps(0), [pod("web-0"), pod("web-1")]).delete, ["web-0", "web-1"]);
  });

  it("builds pods owned by the PodSet", () => {
    const p = podFor(ps(1), "web-0");
    const ref = p.metadata.ownerReferences?.[0];
    assert.equal(ref?.uid, "u1");
    assert.equal(ref?.controller, true);
  });
});
