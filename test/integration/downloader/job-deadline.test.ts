// The download Job's deadline on the real control plane: the Job the operator builds carries
// spec.model.downloadDeadlineSeconds as its activeDeadlineSeconds, the real Job controller
// stops it there (reason DeadlineExceeded), and the status the operator computes from that Job
// names the bound, its value and the field to raise. The Job's pod never gets to run (its
// claim and service account are not made here): the deadline counts from the Job's start.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { BatchV1Api, type V1Job } from "@kubernetes/client-node";
import { desiredDownloadJob } from "../../../src/operator/desired.ts";
import { planModel } from "../../../src/operator/plan.ts";
import { computeStatus, jobEnd } from "../../../src/operator/status.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { model, owner, tf } from "../../unit/operator/fixtures.ts";

// Below the CRD's minimum of 60 (the plan is built here, not admitted), so the test is short.
const deadlineSeconds = 3;

describe("the download Job's deadline (real Job controller)", () => {
  let ns: TestNamespace;
  let batch: BatchV1Api;

  before(async () => {
    ns = await createNamespace("dl-deadline");
    batch = kubeConfig().makeApiClient(BatchV1Api);
  });
  after(() => ns?.delete());

  it("stops the Job at spec.model.downloadDeadlineSeconds and says so in status", async () => {
    const m = model({
      model: { uri: "s3://models/resnet/", format: "tensorflow", downloadDeadlineSeconds: deadlineSeconds },
    });
    m.metadata.namespace = ns.name;
    const plan = planModel(m, tf);
    const job = desiredDownloadJob(plan, owner, { downloaderImage: "example.com/mlmodel:1" });
    assert.ok(job?.metadata && job.spec);
    assert.equal(job.spec.activeDeadlineSeconds, deadlineSeconds);
    // No MLModel owns it here: without this the garbage collector would delete the Job.
    const { ownerReferences: _owner, ...metadata } = job.metadata;
    await batch.createNamespacedJob({ namespace: ns.name, body: { ...job, metadata } });

    const name = job.metadata.name!;
    const stopped = await waitFor<V1Job>(
      `Job ${name} to fail`,
      async () => {
        const observed = await batch.readNamespacedJob({ name, namespace: ns.name });
        return jobEnd(observed)?.type === "Failed" ? observed : undefined;
      },
      {
        describe: async () =>
          JSON.stringify((await batch.readNamespacedJob({ name, namespace: ns.name })).status),
      },
    );
    assert.equal(jobEnd(stopped)?.reason, "DeadlineExceeded");

    const status = computeStatus({
      model: m,
      now: new Date().toISOString(),
      plan,
      revision: "rev1",
      missing: [],
      storage: { status: { phase: "Bound" } },
      job: stopped,
      jobPods: [],
      pods: [],
      service: { metadata: { name: "resnet" } },
    });
    assert.deepEqual([status.phase, status.reason], ["Failed", "DownloadFailed"]);
    assert.match(
      status.message ?? "",
      new RegExp(
        `did not finish within spec\\.model\\.downloadDeadlineSeconds \\(${deadlineSeconds}s\\).*raise spec\\.model\\.downloadDeadlineSeconds`,
      ),
    );
  });
});
