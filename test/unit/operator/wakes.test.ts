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
    assert.equal(wakes(podWakes, pod, ["status", "containerStatuses", 0, "started"], true), true);
    assert.equal(wakes(podWakes, pod, ["metadata", "labels", "job-name"], "j"), true);
    assert.equal(wakes(podWakes, pod, ["metadata", "deletionTimestamp"], "t1"), true);
  });

  it("a pod: being scheduled and its other conditions do not; being unschedulable does", () => {
    const pending: Obj = { ...pod, status: { phase: "Pending" } };
    const scheduled = { type: "PodScheduled", status: "True", lastTransitionTime: "t0" };
    assert.equal(wakes(podWakes, pending, ["status", "conditions"], [scheduled]), false);
    assert.equal(
      wakes(
        podWakes,
        pod,
        ["status", "conditions"],
        [ready("False"), { type: "ContainersReady", status: "True" }],
      ),
      false,
    );
    const unschedulable = {
      type: "PodScheduled",
      status: "False",
      reason: "Unschedulable",
      message: "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    };
    assert.equal(wakes(podWakes, pending, ["status", "conditions"], [unschedulable]), true);
    const otherReasons = { ...pending, status: { phase: "Pending", conditions: [unschedulable] } };
    assert.equal(
      wakes(
        podWakes,
        otherReasons,
        ["status", "conditions", 0, "message"],
        "0/3 nodes are available: 3 Insufficient cpu.",
      ),
      true,
    );
    assert.equal(wakes(podWakes, otherReasons, ["status", "conditions"], [scheduled]), true);
  });

  it("a Job: its ready and ended pods' counts, failed uncounted pods and its end do; its active count, start and success criteria do not", () => {
    const job: Obj = {
      apiVersion: "batch/v1",
      kind: "Job",
      metadata: { name: "j" },
      status: { active: 1, ready: 0 },
    };
    // Its pod ready: the download runs (its pods are not watched).
    assert.equal(wakes(jobWakes, job, ["status", "ready"], 1), true);
    assert.equal(wakes(jobWakes, job, ["status", "startTime"], "t0"), false);
    // Its start as the Job controller writes it: active 1, nothing uncounted yet.
    assert.equal(
      wakes(jobWakes, { ...job, status: {} }, ["status"], { active: 1, uncountedTerminatedPods: {} }),
      false,
    );
    assert.equal(wakes(jobWakes, job, ["status", "active"], 0), false);
    // A succeeded pod not counted yet, and the success criteria met: the Complete that follows wakes.
    assert.equal(wakes(jobWakes, job, ["status", "uncountedTerminatedPods"], { succeeded: ["u"] }), false);
    const met = { type: "SuccessCriteriaMet", status: "True", reason: "CompletionsReached" };
    assert.equal(wakes(jobWakes, job, ["status", "conditions"], [met]), false);
    assert.equal(wakes(jobWakes, job, ["status", "uncountedTerminatedPods"], { failed: ["u"] }), true);
    assert.equal(wakes(jobWakes, job, ["status", "failed"], 1), true);
    assert.equal(wakes(jobWakes, job, ["status", "succeeded"], 1), true);
    assert.equal(
      wakes(jobWakes, job, ["status", "conditions"], [met, { type: "Complete", status: "True" }]),
      true,
    );
    const failed = { type: "Failed", status: "True", reason: "PodFailurePolicy", message: "m" };
    assert.equal(wakes(jobWakes, job, ["status", "conditions"], [failed]), true);
    assert.equal(
      wakes(jobWakes, job, ["metadata", "annotations", "serving.mlmodel.dev/retry-key"], "x"),
      true,
    );
  });

  it("a serving pod's end does", () => {
    const ended = [
      { name: "server", image: "i", ready: false, restartCount: 0, state: { terminated: { exitCode: 0 } } },
    ];
    const succeeded = {
      ...pod,
      status: { ...(pod.status as object), phase: "Succeeded", containerStatuses: ended },
    };
    assert.equal(podWakes({ type: "update", old: pod, object: succeeded, initial: false }), true);
  });

  it("a Deployment: its rollout complete or not, its deadline, its pods' counts, its spec (generation) and our annotations do; conditions, unavailable replicas and others' annotations alone do not", () => {
    const d: Obj = {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "d", generation: 1, annotations: { "serving.mlmodel.dev/applied-hash": "h1" } },
      spec: { replicas: 1, template: {} },
      status: {
        observedGeneration: 1,
        replicas: 1,
        updatedReplicas: 1,
        unavailableReplicas: 1,
        conditions: [
          { type: "Progressing", status: "True", reason: "ReplicaSetUpdated", lastUpdateTime: "t0" },
        ],
      },
    };
    assert.equal(wakes(statusWakes, d, ["status", "conditions", 0, "lastUpdateTime"], "t1"), false);
    assert.equal(
      wakes(statusWakes, d, ["metadata", "annotations", "deployment.kubernetes.io/revision"], "2"),
      false,
    );
    // What the Deployment controller says on the way that the reconcile does not read.
    assert.equal(wakes(statusWakes, d, ["status", "unavailableReplicas"], 0), false);
    const progressed = { type: "Progressing", status: "True", reason: "NewReplicaSetAvailable" };
    assert.equal(wakes(statusWakes, d, ["status", "conditions"], [progressed]), false);
    const created = { ...d, status: { conditions: [progressed] } };
    assert.equal(wakes(statusWakes, created, ["status", "observedGeneration"], 1), false);
    // Rolled out (every desired replica updated and available), an older revision's replica
    // left (a canary's split reads it), and the progress deadline.
    assert.equal(wakes(statusWakes, d, ["status", "availableReplicas"], 1), true);
    assert.equal(wakes(statusWakes, d, ["status", "replicas"], 2), true);
    // Its pods' counts: the model's pods are not watched (serving-pods.ts), these say a pod
    // was created, turned ready or stopped being ready.
    assert.equal(wakes(statusWakes, d, ["status", "readyReplicas"], 1), true);
    assert.equal(wakes(statusWakes, d, ["status", "updatedReplicas"], 0), true);
    const deadline = { type: "Progressing", status: "False", reason: "ProgressDeadlineExceeded" };
    assert.equal(wakes(statusWakes, d, ["status", "conditions"], [deadline]), true);
    assert.equal(wakes(statusWakes, d, ["metadata", "generation"], 2), true);
    assert.equal(
      wakes(statusWakes, d, ["metadata", "annotations", "serving.mlmodel.dev/applied-hash"], "h2"),
      true,
    );
  });

  it("an autoscaler or a disruption budget (no pod template): its whole status but condition times", () => {
    const hpa: Obj = {
      apiVersion: "autoscaling/v2",
      kind: "HorizontalPodAutoscaler",
      metadata: { name: "h", generation: 1 },
      spec: { minReplicas: 1, maxReplicas: 3 },
      status: {
        currentReplicas: 1,
        desiredReplicas: 1,
        conditions: [{ type: "AbleToScale", status: "True" }],
      },
    };
    assert.equal(wakes(statusWakes, hpa, ["status", "desiredReplicas"], 2), true);
    assert.equal(wakes(statusWakes, hpa, ["status", "conditions", 0, "lastTransitionTime"], "t1"), false);
  });

  it("a claim or a Service: its spec by value and a claim's phase do; a claim's volume name and capacity alone do not", () => {
    const claim: Obj = {
      apiVersion: "v1",
      kind: "PersistentVolumeClaim",
      metadata: { name: "c" },
      spec: { resources: { requests: { storage: "1Gi" } } },
      status: { phase: "Pending" },
    };
    assert.equal(wakes(specWakes, claim, ["status", "capacity"], { storage: "1Gi" }), false);
    assert.equal(wakes(specWakes, claim, ["status", "phase"], "Bound"), true);
    // Bound to a volume: its phase says it next.
    assert.equal(wakes(specWakes, claim, ["spec", "volumeName"], "pv"), false);
    assert.equal(wakes(specWakes, claim, ["spec", "resources", "requests", "storage"], "2Gi"), true);
    const service: Obj = { apiVersion: "v1", kind: "Service", metadata: { name: "s" }, spec: {} };
    assert.equal(wakes(specWakes, service, ["spec", "volumeName"], "x"), true, "a claim's alone");
  });
});
