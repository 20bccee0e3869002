import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { MLModelSpec, MLModelStatus } from "../../../src/api/mlmodel.ts";
import { labels } from "../../../src/operator/names.ts";
import {
  activeRollback,
  failureToRecord,
  justRolledBack,
  withRollback,
} from "../../../src/operator/rollback.ts";
import { model } from "./fixtures.ts";

const rev = (hash: string, revision: number, spec: MLModelSpec): V1ControllerRevision => ({
  metadata: { name: `resnet-${hash}`, labels: { [labels.revision]: hash } },
  data: { spec },
  revision,
});
const good = rev("good", 1, { model: { uri: "s3://b/v1" }, image: "srv:1" });
const bad = rev("bad", 2, { model: { uri: "s3://b/v1" }, image: "crash:2" });
const now = "2026-01-01T00:00:00Z";
const failedStatus: MLModelStatus = {
  phase: "Failed",
  reason: "CrashLoopBackOff",
  message: "server keeps crashing",
  revision: { current: "bad", lastReady: "good" },
};

describe("automatic rollback", () => {
  const m = model({ model: { uri: "s3://b/v1" }, image: "crash:2", replicas: 3 });
  it("records a failure of the spec's revision when a last ready revision exists", () => {
    assert.deepEqual(failureToRecord(m, failedStatus, "bad", [good, bad], now), {
      revision: "bad",
      number: 2,
      reason: "CrashLoopBackOff",
      message: "server keeps crashing",
      at: now,
    });
  });
  it("records nothing when off, when waiting rather than failed, or with nothing to return to", () => {
    const off = model({ ...m.spec, rollout: { autoRollback: false } });
    assert.equal(failureToRecord(off, failedStatus, "bad", [good, bad], now), undefined);
    assert.equal(
      failureToRecord(
        m,
        { ...failedStatus, phase: "Pending", reason: "Unschedulable" },
        "bad",
        [good, bad],
        now,
      ),
      undefined,
    );
    assert.equal(
      failureToRecord(m, failedStatus, "bad", [bad], now),
      undefined,
      "last ready revision pruned",
    );
    const first = { ...failedStatus, revision: { current: "bad" } };
    assert.equal(failureToRecord(m, first, "bad", [bad], now), undefined, "never ready before");
  });
  it("serves the last ready spec with the user's scaling while the spec's revision is the failed one", () => {
    const recorded = {
      ...m,
      status: {
        ...failedStatus,
        revision: {
          current: "bad",
          lastReady: "good",
          failed: { revision: "bad", number: 2, reason: "CrashLoopBackOff", message: "x" },
        },
      },
    };
    const active = activeRollback(recorded, "bad", [good, bad]);
    assert.deepEqual(active?.spec, { model: { uri: "s3://b/v1" }, image: "srv:1", replicas: 3 });
    assert.equal(activeRollback(recorded, "fixed", [good, bad]), undefined, "a changed spec rolls forward");
  });
  it("says which revision failed and why, once", () => {
    const served: MLModelStatus = {
      phase: "Ready",
      reason: "Serving",
      message: "3 replica(s) ready",
      conditions: [
        { type: "Ready", status: "True", reason: "Serving", message: "", lastTransitionTime: now },
      ],
      revision: { current: "good", lastReady: "good" },
    };
    const failed = {
      revision: "bad",
      number: 2,
      reason: "CrashLoopBackOff",
      message: "server keeps crashing",
    };
    const s = withRollback(served, undefined, failed, good, 3, now);
    assert.equal(s.reason, "RolledBack");
    assert.match(
      s.message ?? "",
      /rolled back to revision 1 \(good\): revision 2 \(bad\) failed \(CrashLoopBackOff\): server keeps crashing/,
    );
    const c = s.conditions?.find((x) => x.type === "RolledBack");
    assert.equal(c?.status, "True");
    assert.equal(c?.reason, "CrashLoopBackOff");
    assert.equal(s.conditions?.find((x) => x.type === "Ready")?.reason, "RolledBack");
    assert.equal(s.revision?.failed, failed);
    assert.ok(justRolledBack(served, s));
    assert.ok(!justRolledBack(s, withRollback(served, s, failed, good, 3, "2026-01-02T00:00:00Z")));
    assert.equal(
      withRollback(served, s, failed, good, 3, "later").conditions?.at(-1)?.lastTransitionTime,
      now,
    );
  });
});
