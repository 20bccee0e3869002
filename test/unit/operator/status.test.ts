import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Job, V1Pod } from "@kubernetes/client-node";
import { mlModelStatusSchema } from "../../../src/api/mlmodel.ts";
import { downloaderStatusFields } from "../../../src/downloader/contract.ts";
import { Progress } from "../../../src/downloader/progress.ts";
import { holds, needsApply, withAppliedHash } from "../../../src/operator/drift.ts";
import { canonicalJson, labels } from "../../../src/operator/names.ts";
import { planModel } from "../../../src/operator/plan.ts";
import {
  claimBinding,
  computeStatus,
  jobState,
  type Observed,
  operatorOwned,
  transitionEvent,
} from "../../../src/operator/status.ts";
import { deployment, model, pod, tfServing } from "./fixtures.ts";

const tf = { ref: "ClusterServingRuntime/tensorflow-serving", spec: tfServing.spec };
const m = model({ model: { uri: "s3://b/m", format: "tensorflow" }, replicas: 2 });
const plan = planModel(m, tf);
const jobName = plan.source.type === "download" ? plan.source.jobName : "";
const done: V1Job = {
  metadata: { name: jobName },
  status: { succeeded: 1, conditions: [{ type: "Complete", status: "True" }] },
};
const service = { metadata: { name: "resnet" } };

function observe(extra: Partial<Observed>): Observed {
  return {
    model: m,
    now: "2026-01-01T00:00:00Z",
    plan,
    revision: "rev1",
    missing: [],
    storage: { status: { phase: "Bound" } },
    job: done,
    jobPods: [],
    pods: [],
    service,
    ...extra,
  };
}

describe("computeStatus", () => {
  it("is Ready only when every desired replica of the current revision is ready", () => {
    const s = computeStatus(
      observe({
        deployment: deployment(2, 2),
        pods: [pod("a", "rev1", { ready: true }), pod("b", "rev1", { ready: true })],
      }),
    );
    assert.equal(s.phase, "Ready");
    assert.equal(s.readyReplicas, 2);
    assert.equal(s.restURL, "http://resnet.ml.svc:8501");
    assert.equal(s.grpcURL, "resnet.ml.svc:8500");
    assert.equal(s.revision?.lastReady, "rev1");
  });

  it("is not Ready when the Deployment claims readiness but the pods do not", () => {
    const s = computeStatus(
      observe({ deployment: deployment(2, 2), pods: [pod("a", "rev1", { ready: true }), pod("b", "rev1")] }),
    );
    assert.equal(s.phase, "Deploying");
    assert.equal(s.conditions?.find((c) => c.type === "Ready")?.status, "False");
  });

  it("is not Ready while only old-revision pods are ready", () => {
    const s = computeStatus(
      observe({
        deployment: deployment(1, 1),
        pods: [pod("old", "rev0", { ready: true }), pod("new", "rev1")],
      }),
    );
    assert.notEqual(s.phase, "Ready");
    assert.equal(s.readyReplicas, 1);
  });

  for (const [waiting, reason] of [
    ["CrashLoopBackOff", "CrashLoopBackOff"],
    ["ErrImagePull", "ImagePullBackOff"],
    ["ImagePullBackOff", "ImagePullBackOff"],
  ] as const) {
    it(`reports ${waiting} as Failed/${reason} with an actionable message`, () => {
      const s = computeStatus(
        observe({ deployment: deployment(1, 0), pods: [pod("a", "rev1", { waiting })] }),
      );
      assert.equal(s.phase, "Failed");
      assert.equal(s.reason, reason);
      assert.match(
        s.message ?? "",
        reason === "CrashLoopBackOff" ? /keeps crashing.*out of memory/ : /cannot pull image/,
      );
    });
  }

  it("reports an unschedulable pod as Pending/Unschedulable with the scheduler's words", () => {
    const s = computeStatus(
      observe({
        deployment: deployment(1, 0),
        pods: [pod("a", "rev1", { unschedulable: "0/3 nodes: Insufficient nvidia.com/gpu" })],
      }),
    );
    assert.deepEqual([s.phase, s.reason], ["Pending", "Unschedulable"]);
    assert.match(s.message ?? "", /Insufficient nvidia.com\/gpu/);
  });

  // The scheduler's own words on the local control plane (kube-scheduler v1.36.3): its reasons,
  // then a note from its preemption step, which the message leaves out.
  for (const [scheduler, expected] of [
    [
      "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found",
      "pod a cannot be scheduled (0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims): the model's claim has no volume, so the cluster needs a StorageClass that provisions volumes (spec.storage.storageClassName) or a matching PersistentVolume",
    ],
    [
      "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
      "pod a cannot be scheduled (0/3 nodes are available: 3 Insufficient nvidia.com/gpu): free or add capacity (e.g. GPUs), or relax resources and placement",
    ],
  ] as const) {
    it(`says why a pod cannot be scheduled in one sentence: ${scheduler.slice(25, 70)}...`, () => {
      const s = computeStatus(
        observe({ deployment: deployment(1, 0), pods: [pod("a", "rev1", { unschedulable: scheduler })] }),
      );
      assert.equal(s.message, expected);
    });
  }

  it("reports a Deployment past its progress deadline", () => {
    const d = deployment(1, 0, {
      conditions: [{ type: "Progressing", status: "False", reason: "ProgressDeadlineExceeded" }],
    });
    const s = computeStatus(observe({ deployment: d, pods: [pod("a", "rev1")] }));
    assert.deepEqual([s.phase, s.reason], ["Failed", "ProgressDeadlineExceeded"]);
  });

  it("copies the downloader's termination message into a DownloadFailed status", () => {
    const failed: V1Job = {
      metadata: { name: jobName },
      status: { failed: 4, conditions: [{ type: "Failed", status: "True", reason: "BackoffLimitExceeded" }] },
    };
    const jobPod = {
      metadata: { name: "dl", creationTimestamp: "2026-01-01T00:00:00Z" },
      status: {
        containerStatuses: [
          {
            name: "download",
            state: {
              terminated: { exitCode: 1, message: "s3://b/m: AccessDenied: check the keys in Secret creds" },
            },
          },
        ],
      },
    } as unknown as V1Pod;
    const s = computeStatus(observe({ job: failed, jobPods: [jobPod] }));
    assert.deepEqual([s.phase, s.reason], ["Failed", "DownloadFailed"]);
    assert.match(s.message ?? "", /BackoffLimitExceeded.*AccessDenied: check the keys in Secret creds/);
    assert.equal(s.download?.jobState, "Failed");
  });

  it("waits, and says so, for a missing Secret", () => {
    const s = computeStatus(
      observe({ missing: [{ reason: "SecretNotFound", message: "Secret creds does not exist" }] }),
    );
    assert.deepEqual([s.phase, s.reason], ["Pending", "SecretNotFound"]);
    assert.match(s.message ?? "", /waiting for it to appear/);
  });

  it("reports an unknown runtime as Failed/RuntimeNotFound", () => {
    const s = computeStatus(
      observe({
        plan: undefined,
        revision: undefined,
        planFailure: { reason: "RuntimeNotFound", message: "no runtime x" },
      }),
    );
    assert.deepEqual([s.phase, s.reason], ["Failed", "RuntimeNotFound"]);
  });

  it("is Downloading while the Job runs; its pod counts as an attempt once it runs", () => {
    const active: V1Job = { metadata: { name: jobName }, status: { active: 1 } };
    const waiting = computeStatus(observe({ job: active, jobPods: [{ status: { phase: "Pending" } }] }));
    assert.deepEqual(
      [waiting.phase, waiting.download?.jobState, waiting.download?.attempts],
      ["Downloading", "Pending", 0],
    );
    const s = computeStatus(observe({ job: active, jobPods: [{ status: { phase: "Running" } }] }));
    assert.deepEqual([s.phase, s.download?.jobState, s.download?.attempts], ["Downloading", "Running", 1]);
    assert.match(s.message ?? "", /is downloading s3:\/\/b\/m/);
    // Its pods are not read once the Job counts one ready (mlmodel/download-pods.ts).
    const ready = computeStatus(
      observe({ job: { ...active, status: { active: 1, ready: 1 } }, jobPods: [] }),
    );
    assert.deepEqual(
      [ready.phase, ready.download?.jobState, ready.download?.attempts],
      ["Downloading", "Running", 1],
    );
  });

  it("counts a download pod that ended before the Job controller counted it: Running, not back to Pending", () => {
    const justEnded: V1Job = {
      metadata: { name: jobName },
      status: { active: 0, uncountedTerminatedPods: { succeeded: ["uid-1"] } },
    };
    const s = computeStatus(observe({ job: justEnded }));
    assert.deepEqual([s.phase, s.download?.jobState, s.download?.attempts], ["Downloading", "Running", 1]);
    const notStarted = computeStatus(observe({ job: { metadata: { name: jobName }, status: {} } }));
    assert.deepEqual([notStarted.download?.jobState, notStarted.download?.attempts], ["Pending", 0]);
  });

  describe("a download pod waiting for its new claim's volume", () => {
    const unbound = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found";
    const waiting = (claimAgeSeconds: number, phase = "Pending", why = unbound): Observed =>
      observe({
        storage: {
          metadata: {
            creationTimestamp: new Date(Date.parse("2026-01-01T00:00:00Z") - claimAgeSeconds * 1000),
          },
          status: { phase },
        },
        job: { metadata: { name: jobName }, status: { active: 1 } },
        jobPods: [pod("dl", "rev1", { unschedulable: why })],
      });

    it("is Downloading (waiting for the volume) within the grace, with the ms left of it", () => {
      const o = waiting(280);
      const s = computeStatus(o);
      assert.deepEqual([s.phase, s.reason], ["Downloading", "Downloading"]);
      assert.match(s.message ?? "", /waits for its volume \(claim resnet-model\)/);
      assert.equal(s.conditions?.find((c) => c.type === "StorageReady")?.reason, "ClaimPending");
      assert.equal(claimBinding(o), 20_000);
    });

    it("is Pending/Unschedulable with the StorageClass hint once the grace is over", () => {
      const o = waiting(301);
      assert.deepEqual([computeStatus(o).phase, computeStatus(o).reason], ["Pending", "Unschedulable"]);
      assert.equal(claimBinding(o), undefined);
    });

    it("is still Downloading when the claim just bound and the scheduler has not tried the pod again", () => {
      const o = waiting(295, "Bound");
      assert.equal(computeStatus(o).reason, "Downloading");
      assert.equal(claimBinding(o), 5_000);
    });

    it("is Unschedulable at once for any other reason, or when the claim lost its volume", () => {
      const otherReason = waiting(1, "Pending", "0/3 nodes are available: 3 Insufficient cpu.");
      assert.equal(computeStatus(otherReason).reason, "Unschedulable");
      assert.equal(claimBinding(otherReason), undefined);
      const lost = waiting(1, "Lost");
      assert.equal(computeStatus(lost).reason, "ClaimLost");
      assert.equal(claimBinding(lost), undefined);
    });
  });

  it("never sends the downloader's progress fields (that would take their ownership)", () => {
    const running: V1Job = { metadata: { name: jobName }, status: { active: 1 } };
    const progress = {
      phase: "Downloading" as const,
      bytesDone: 100,
      bytesTotal: 400,
      bytesPerSecond: 50,
      filesDone: 0,
      filesTotal: 1,
      startedAt: "2026-01-01T00:00:00Z",
      updatedAt: "2026-01-01T00:00:02Z",
      progress: "25% 100B/400B 50B/s",
    };
    const reported = {
      ...m,
      status: { download: { job: jobName, jobState: "Running" as const, attempts: 1, ...progress } },
    };
    const s = computeStatus(observe({ model: reported, job: running }));
    assert.deepEqual(Object.keys(s.download ?? {}).sort(), ["attempts", "job", "jobState"]);
    for (const field of downloaderStatusFields)
      assert.equal((s.download as Record<string, unknown>)[field], undefined, field);
  });

  it("compares only its own fields: progress alone never triggers an operator status write", () => {
    const mine = {
      phase: "Downloading" as const,
      download: { job: "j", jobState: "Running" as const, attempts: 1 },
    };
    const withProgress = { ...mine, download: { ...mine.download, bytesDone: 5, progress: "5B 1B/s" } };
    assert.equal(canonicalJson(operatorOwned(withProgress)), canonicalJson(operatorOwned(mine)));
    assert.notEqual(
      canonicalJson(operatorOwned({ ...mine, download: { ...mine.download, jobState: "Succeeded" } })),
      canonicalJson(operatorOwned(mine)),
      "its own field changing is a change",
    );
    // The downloader's fields with none of the operator's (after a pvc:// switch) are no status of its own.
    assert.equal(
      canonicalJson(operatorOwned({ phase: "Ready", download: { bytesDone: 5, phase: "Complete" } })),
      canonicalJson(operatorOwned({ phase: "Ready" })),
    );
  });

  it("the CRD's status.download fields are the operator's three plus exactly the downloader's", () => {
    const schema = mlModelStatusSchema.properties.download.properties;
    assert.deepEqual(
      Object.keys(schema).sort(),
      ["attempts", "job", "jobState", ...downloaderStatusFields].sort(),
    );
    const snapshot = new Progress().snapshot();
    for (const key of Object.keys(snapshot))
      assert.ok((downloaderStatusFields as readonly string[]).includes(key), `${key} is declared`);
  });

  it("keeps lastTransitionTime when a condition does not change (no needless status writes)", () => {
    const o = observe({
      deployment: deployment(2, 2),
      pods: [pod("a", "rev1", { ready: true }), pod("b", "rev1", { ready: true })],
    });
    const first = computeStatus(o);
    const again = computeStatus({ ...o, model: { ...m, status: first }, now: "2026-01-02T00:00:00Z" });
    assert.deepEqual(again, first);
  });

  it("emits an Event for a problem (Warning) and for its end (Normal), none for the steps of a healthy rollout", () => {
    assert.equal(
      transitionEvent({ phase: "Ready", reason: "Serving" }, { phase: "Ready", reason: "Serving" }),
      undefined,
    );
    assert.equal(
      transitionEvent(
        { phase: "Ready", reason: "Serving" },
        { phase: "Failed", reason: "CrashLoopBackOff", message: "x" },
      )?.type,
      "Warning",
    );
    assert.equal(transitionEvent(undefined, { phase: "Downloading", reason: "Downloading" }), undefined);
    assert.equal(
      transitionEvent(
        { phase: "Downloading", reason: "Downloading" },
        { phase: "Deploying", reason: "ReplicasNotReady" },
      ),
      undefined,
    );
    assert.equal(
      transitionEvent(
        { phase: "Deploying", reason: "ReplicasNotReady" },
        { phase: "Ready", reason: "Serving" },
      ),
      undefined,
    );
    assert.deepEqual(
      transitionEvent(
        { phase: "Pending", reason: "Unschedulable" },
        { phase: "Deploying", reason: "ReplicasNotReady", message: "0 of 1" },
      ),
      { type: "Normal", reason: "ReplicasNotReady", message: "Deploying: 0 of 1" },
      "the end of a problem is said",
    );
    assert.equal(
      transitionEvent({ phase: "Failed", reason: "CrashLoopBackOff" }, { phase: "Ready", reason: "Serving" })
        ?.type,
      "Normal",
    );
  });
});

describe("jobState", () => {
  it("reads a Job's end from its conditions: Complete, Failed, else Active; none without a Job", () => {
    const ended = (type: string, status = "True"): V1Job => ({ status: { conditions: [{ type, status }] } });
    assert.equal(jobState(undefined), undefined);
    assert.equal(jobState({ status: { active: 1 } }), "Active");
    assert.equal(jobState(ended("Complete")), "Complete");
    assert.equal(jobState(ended("Failed")), "Failed");
    assert.equal(jobState(ended("Failed", "False")), "Active");
    assert.equal(jobState(ended("Suspended")), "Active");
  });
});

describe("drift detection", () => {
  const desired = withAppliedHash({
    metadata: { name: "x", labels: { a: "1" } },
    spec: {
      replicas: 2,
      template: {
        spec: {
          containers: [{ name: "c", resources: { requests: { cpu: "1000m", memory: "1Gi" } }, args: [] }],
        },
      },
    },
  });

  it("skips the write when the live object holds every field we own (server defaults ignored)", () => {
    const live = structuredClone(desired) as typeof desired & { spec: Record<string, unknown> };
    live.spec.progressDeadlineSeconds = 600; // a server default
    (live.spec.template.spec.containers[0] as Record<string, unknown>).terminationMessagePath =
      "/dev/termination-log";
    live.spec.template.spec.containers[0]!.resources.requests.cpu = "1"; // canonicalised quantity
    assert.equal(needsApply(desired, live), false);
  });

  it("writes when someone changed a field we own", () => {
    const live = structuredClone(desired);
    live.spec.replicas = 5;
    assert.equal(needsApply(desired, live), true);
  });

  it("writes when we stopped setting a field (the hash differs)", () => {
    const next = withAppliedHash({ ...desired, metadata: { name: "x", labels: {} } });
    assert.equal(needsApply(next, desired), true);
  });

  it("compares quantities by value only inside resource maps", () => {
    assert.equal(holds({ limits: { memory: "1024Mi" } }, { limits: { memory: "1Gi" } }), true);
    assert.equal(holds({ env: "1000m" }, { env: "1" }), false);
  });
});

describe("computeStatus with the pods not read: the Deployment's counts (mlmodel/serving-pods.ts)", () => {
  const observed = (extra: Partial<Observed>): Observed => observe({ pods: undefined, ...extra });
  const ofRevision = (d: V1Deployment, revision: string): V1Deployment => ({
    ...d,
    spec: { ...d.spec!, template: { metadata: { labels: { [labels.revision]: revision } } } },
  });

  it("settled on the current revision: its counts are the model's", () => {
    const d = ofRevision(deployment(3, 3), "rev1");
    const s = computeStatus(observed({ deployment: d }));
    const serving = s.conditions?.find((c) => c.type === "ServingReady");
    assert.deepEqual([serving?.status, serving?.message], ["True", "3 of 3 replicas ready"]);
    assert.deepEqual([s.replicas, s.readyReplicas, s.updatedReplicas], [3, 3, 3]);
  });

  it("settled on another revision (the new one just applied): none of the current revision's", () => {
    const d = ofRevision(deployment(2, 2), "rev0");
    const s = computeStatus(observed({ deployment: d }));
    assert.equal(s.phase, "Deploying");
    assert.equal(s.message, "0 of 2 replicas of the current revision ready");
    assert.deepEqual([s.replicas, s.readyReplicas, s.updatedReplicas], [2, 2, 0]);
  });

  it("never seen by the Deployment controller (just created): no replica at all", () => {
    const d = { ...ofRevision(deployment(1, 0), "rev1"), status: {} };
    const s = computeStatus(observed({ deployment: d }));
    assert.equal(s.phase, "Deploying");
    assert.deepEqual([s.replicas, s.readyReplicas, s.updatedReplicas], [0, 0, 0]);
  });
});
