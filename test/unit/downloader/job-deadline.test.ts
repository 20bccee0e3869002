// The download Job's deadline: spec.model.downloadDeadlineSeconds (a schema default when
// unset) becomes the Job's activeDeadlineSeconds, and a Job stopped by it is reported as such:
// which bound, its value and what to change, not the downloader's last progress line.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Job, V1Pod } from "@kubernetes/client-node";
import { desiredDownloadJob } from "../../../src/operator/desired.ts";
import { planModel } from "../../../src/operator/plan.ts";
import { computeStatus, type Observed } from "../../../src/operator/status.ts";
import { model, owner, tf } from "../operator/fixtures.ts";

const config = { downloaderImage: "example.com/mlmodel:1" };

function planFor(deadline?: number) {
  const spec = {
    uri: "s3://b/m",
    format: "tensorflow",
    ...(deadline ? { downloadDeadlineSeconds: deadline } : {}),
  };
  return planModel(model({ model: spec }), tf);
}

/** A Job the Job controller stopped at its deadline, and its pod killed mid-download. */
function stoppedAtDeadline(jobName: string): { job: V1Job; pod: V1Pod } {
  const job: V1Job = {
    metadata: { name: jobName },
    status: {
      failed: 1,
      conditions: [
        {
          type: "Failed",
          status: "True",
          reason: "DeadlineExceeded",
          message: "Job was active longer than specified deadline",
        },
      ],
    },
  };
  const pod = {
    metadata: { name: `${jobName}-x`, creationTimestamp: "2026-01-01T00:00:00Z" },
    status: {
      containerStatuses: [
        {
          name: "download",
          // FallbackToLogsOnError: a killed downloader leaves its last log line.
          state: { terminated: { exitCode: 143, message: "Downloading: 412Mi 3.1Mi/s" } },
        },
      ],
    },
  } as unknown as V1Pod;
  return { job, pod };
}

describe("the download Job's deadline", () => {
  it("is the schema's default when the spec says nothing", () => {
    const job = desiredDownloadJob(planFor(), owner, config);
    assert.equal(job?.spec?.activeDeadlineSeconds, 21600);
  });

  it("is spec.model.downloadDeadlineSeconds when set", () => {
    const job = desiredDownloadJob(planFor(7200), owner, config);
    assert.equal(job?.spec?.activeDeadlineSeconds, 7200);
  });

  it("names the bound, its value and the field to raise when the Job is stopped by it", () => {
    const plan = planFor(7200);
    const jobName = plan.source.type === "download" ? plan.source.jobName : "";
    const { job, pod } = stoppedAtDeadline(jobName);
    const observed: Observed = {
      model: model({ model: { uri: "s3://b/m", format: "tensorflow", downloadDeadlineSeconds: 7200 } }),
      now: "2026-01-01T02:00:05Z",
      plan,
      revision: "rev1",
      missing: [],
      storage: { status: { phase: "Bound" } },
      job,
      jobPods: [pod],
      pods: [],
      service: { metadata: { name: "resnet" } },
    };
    const s = computeStatus(observed);
    assert.deepEqual([s.phase, s.reason], ["Failed", "DownloadFailed"]);
    assert.match(
      s.message ?? "",
      /download of s3:\/\/b\/m did not finish within spec\.model\.downloadDeadlineSeconds \(7200s\).*raise spec\.model\.downloadDeadlineSeconds/,
    );
    assert.equal(s.download?.jobState, "Failed");
  });
});
