import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { jobWakes, podWakes, specWakes, statusWakes } from "../../../src/operator/mlmodel/wakes.ts";
import type { KubeObject, Predicate } from "../../../src/runtime/index.ts";

type Obj = KubeObject & Record<string, unknown>;

/** Whether an update of `old` that sets `value` at `path` wakes the model. */
function wakes(p: Predicate, old: Obj, path: (string | number)[], value: unknown): boolean {
  const object = structuredClone(old);
  let at = object as Record<string | number, unknown>;
  for (const key of path.slice(0, -1)) {
    at[key] ??= {};
    at = at[key] as Record<string | number, unknown>;
  }
  at[path.at(-1)!] = value;
  return p({ type: "update", old, object, initial: false });
}

const ready = (status: string, at = "2026-01-01T00:00:00Z") => ({
  type: "Ready",
  status,
  lastTransitionTime: at,
  lastProbeTime: null,
});

const pod: Obj = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: {
    name: "p",
    labels: { "serving.mlmodel.dev/model": "m" },
    finalizers: ["batch.kubernetes.io/job-tracking"],
  },
  status: {
    phase: "Running",
    podIP: "10.0.0.1",
    conditions: [ready("False")],
    containerStatuses: [
      { name: "c", image: "i", ready: false, restartCount: 0, state: { running: { startedAt: "t0" } } },
    ],
  },
};

describe("what of a child wakes its model", () => {
  it("adds and deletes always do", () => {
    for (const p of [podWakes, jobWakes, statusWakes, specWakes]) {
      assert.equal(p({ type: "add", object: pod, initial: false }), true);
      assert.equal(p({ type: "delete", object: pod, initial: false }), true);
    }
  });

  it("a pod: readiness, container state, labels and deletion do; finalizers, IPs and probe times do not", () => {
    assert.equal(wakes(podWakes, pod, ["metadata", "finalizers"], []), false);
    assert.equal(wakes(podWakes, pod, ["status", "podIP"], "10.0.0.2"), false);
    assert.equal(wakes(podWakes, pod, ["status", "conditions", 0, "lastProbeTime"], "t1"), false);
    assert.equal(wakes(podWakes, pod, ["status", "conditions"], [ready("True", "t1")]), true);
    const waiting = { waiting: { reason: "CrashLoopBackOff" } };
    assert.equal(wakes(podWakes, pod, ["status", "containerStatuses", 0, "state"], waiting), true);
    assert.equal(wakes(podWakes, pod, ["status", "containerStatuses", 0, "restartCount"], 1), true);
    assert.equal(wakes(podWakes, pod, ["metadata", "labels", "job-name"], "j"), true);
    assert.equal(wakes(podWakes, pod, ["metadata", "deletionTimestamp"], "t1"), true);
  });

  it("a Job: pod counts, uncounted pods and its end do; its ready count and start time do not", () => {
    const job: Obj = {
      apiVersion: "batch/v1",
      kind: "Job",
      metadata: { name: "j" },
      status: { active: 1, ready: 0 },
    };
    assert.equal(wakes(jobWakes, job, ["status", "ready"], 1), false);
    assert.equal(wakes(jobWakes, job, ["status", "startTime"], "t0"), false);
    assert.equal(wakes(jobWakes, job, ["status", "uncountedTerminatedPods"], { succeeded: ["u"] }), true);
    assert.equal(wakes(jobWakes, job, ["status", "active"], 0), true);
    assert.equal(
      wakes(jobWakes, job, ["status", "conditions"], [{ type: "Complete", status: "True" }]),
      true,
    );
    assert.equal(
      wakes(jobWakes, job, ["metadata", "annotations", "serving.mlmodel.dev/retry-key"], "x"),
      true,
    );
  });

  it("a Deployment: status counts, its spec (generation) and our annotations do; condition times and others' annotations do not", () => {
    const d: Obj = {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "d", generation: 1, annotations: { "serving.mlmodel.dev/applied-hash": "h1" } },
      status: {
        replicas: 1,
        readyReplicas: 0,
        conditions: [
          { type: "Progressing", status: "True", reason: "NewReplicaSetAvailable", lastUpdateTime: "t0" },
        ],
      },
    };
    assert.equal(wakes(statusWakes, d, ["status", "conditions", 0, "lastUpdateTime"], "t1"), false);
    assert.equal(
      wakes(statusWakes, d, ["metadata", "annotations", "deployment.kubernetes.io/revision"], "2"),
      false,
    );
    assert.equal(wakes(statusWakes, d, ["status", "readyReplicas"], 1), true);
    assert.equal(wakes(statusWakes, d, ["metadata", "generation"], 2), true);
    assert.equal(
      wakes(statusWakes, d, ["metadata", "annotations", "serving.mlmodel.dev/applied-hash"], "h2"),
      true,
    );
  });

  it("a claim or a Service: its spec by value and a claim's phase do; its capacity alone does not", () => {
    const claim: Obj = {
      apiVersion: "v1",
      kind: "PersistentVolumeClaim",
      metadata: { name: "c" },
      spec: { resources: { requests: { storage: "1Gi" } } },
      status: { phase: "Pending" },
    };
    assert.equal(wakes(specWakes, claim, ["status", "capacity"], { storage: "1Gi" }), false);
    assert.equal(wakes(specWakes, claim, ["status", "phase"], "Bound"), true);
    assert.equal(wakes(specWakes, claim, ["spec", "volumeName"], "pv"), true);
  });
});
