// A model URI with credentials in it (a pre-signed URL): the Job reads the exact URI from its
// revision's Secret; the Job, the ControllerRevision, status, Events and history show it redacted.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision, V1Job } from "@kubernetes/client-node";
import type { MLModelStatus } from "../../../src/api/mlmodel.ts";
import { cacheKey } from "../../../src/nodecache/contract.ts";
import {
  desiredDownloadJob,
  desiredUriSecret,
  servingPodTemplate,
  uriSecretKey,
  uriSecretType,
} from "../../../src/operator/desired.ts";
import { childNames, labels } from "../../../src/operator/names.ts";
import { contentHash, planModel } from "../../../src/operator/plan.ts";
import {
  desiredRevision,
  historyEntries,
  recordedSource,
  revisionData,
  revisionSpec,
} from "../../../src/operator/revisions.ts";
import { activeRollback, withRollback } from "../../../src/operator/rollback.ts";
import { computeStatus, type Observed, transitionEvent } from "../../../src/operator/status.ts";
import { model, tfServing } from "./fixtures.ts";

const canary = "canary0123456789abcdef";
const signed = `https://bucket.s3.amazonaws.com/resnet.tgz?X-Amz-Credential=AKIA%2F${canary}&X-Amz-Signature=${canary}`;
const shown = "https://bucket.s3.amazonaws.com/resnet.tgz?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED";
const tf = { ref: "ClusterServingRuntime/tensorflow-serving", spec: tfServing.spec };
const owner = { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", name: "resnet", uid: "uid-1" };
const config = { downloaderImage: "example.com/mlmodel:1" };
const spec = { model: { uri: signed, format: "tensorflow", version: "1" } };

const envOf = (job: V1Job) => job.spec!.template.spec!.containers[0]!.env ?? [];
const argsOf = (job: V1Job) => job.spec!.template.spec!.containers[0]!.args ?? [];

describe("a model URI with credentials in it", () => {
  const plan = planModel(model(spec), tf);
  const revision = servingPodTemplate(plan).revision;
  const secretName = childNames.uriSecret("resnet", revision);

  it("the plan shows it redacted and keeps the exact URI for the Secret only", () => {
    assert.equal(plan.source.type, "download");
    if (plan.source.type !== "download") return;
    assert.equal(plan.source.shownUri, shown);
    assert.equal(plan.source.exactUri, signed);
    assert.equal(plan.source.content, contentHash(spec), "the content is the exact URI's");
  });

  it("the Job reads it from the revision's Secret: not in its args, not in any env value", () => {
    const job = desiredDownloadJob(plan, owner, config)!;
    assert.deepEqual(argsOf(job).slice(0, 2), ["--uri-from-env", "MLMODEL_URI"]);
    assert.deepEqual(envOf(job)[0], {
      name: "MLMODEL_URI",
      valueFrom: { secretKeyRef: { name: secretName, key: uriSecretKey } },
    });
    assert.ok(!JSON.stringify(job).includes(canary), "the Job holds no part of the credentials");
  });

  it("the Secret holds the exact URI, is immutable, of its own type and owned as told", () => {
    const revOwner = {
      apiVersion: "apps/v1",
      kind: "ControllerRevision",
      name: "r",
      uid: "u",
      controller: true,
    };
    const secret = desiredUriSecret(plan, revOwner)!;
    assert.equal(secret.metadata?.name, secretName);
    assert.equal(secret.type, uriSecretType);
    assert.equal(secret.immutable, true);
    assert.deepEqual(secret.metadata?.ownerReferences, [revOwner]);
    assert.equal(Buffer.from(secret.data![uriSecretKey]!, "base64").toString(), signed);
    assert.ok(secretName.length <= 63 || childNames.uriSecret("m".repeat(48), revision).length <= 63);
  });

  it("a plain URI stays in the Job's args, with no Secret (no extra write)", () => {
    const plain = planModel(model({ model: { uri: "s3://bucket/resnet/", format: "tensorflow" } }), tf);
    const job = desiredDownloadJob(plain, owner, config)!;
    assert.deepEqual(argsOf(job).slice(0, 2), ["--uri", "s3://bucket/resnet/"]);
    assert.ok(!envOf(job).some((e) => e.name === "MLMODEL_URI"));
    assert.equal(desiredUriSecret(plain, owner), undefined);
  });

  it("the ControllerRevision records it redacted, with the content and the Secret beside it", () => {
    const data = revisionData(spec, "resnet", revision);
    assert.equal(data.spec.model.uri, shown);
    assert.deepEqual(data.source, {
      content: contentHash(spec),
      uriSecret: secretName,
      cacheKey: cacheKey(spec.model.uri),
    });
    assert.ok(!JSON.stringify(data).includes(canary));
    const recorded = desiredRevision(model(spec), revision, owner, [])?.data;
    assert.deepEqual(recorded, data, "what the operator records for a new revision");
    const plain = revisionData({ model: { uri: "s3://b/m" } }, "resnet", "h");
    assert.deepEqual(plain, { spec: { model: { uri: "s3://b/m" } } }, "a plain URI is recorded as it is");
  });

  it("served again from its revision, it downloads the same content from the same Secret", () => {
    const rev: V1ControllerRevision = {
      metadata: { name: `resnet-${revision}`, labels: { [labels.revision]: revision }, uid: "rev-uid" },
      data: revisionData(spec, "resnet", revision),
      revision: 1,
    };
    const again = planModel(model({ ...spec, model: revisionSpec(rev)!.model }), tf, recordedSource(rev));
    assert.equal(servingPodTemplate(again).revision, revision, "the same serving revision");
    const job = desiredDownloadJob(again, owner, config)!;
    assert.equal(job.metadata?.name, desiredDownloadJob(plan, owner, config)!.metadata?.name);
    assert.deepEqual(envOf(job)[0]?.valueFrom?.secretKeyRef, { name: secretName, key: uriSecretKey });
    assert.equal(desiredUriSecret(again, owner), undefined, "the operator does not know the exact URI then");
    // The rollback step hands the recorded source to the plan.
    const failed = { revision: "bad", reason: "DownloadFailed", message: `m ${signed}`, at: "t" };
    const current = model({ model: { uri: "s3://b/new", format: "tensorflow" } });
    current.status = { revision: { lastReady: revision, failed } };
    const rollback = activeRollback(current, "bad", [rev]);
    assert.deepEqual(rollback?.recorded, recordedSource(rev));
    const status = withRollback({ phase: "Ready" }, undefined, failed, rev, 1, "now");
    assert.ok(!JSON.stringify(status).includes(canary), "the recorded failure is shown redacted");
  });

  it("history shows a URI an older operator recorded exact, redacted", () => {
    const legacy: V1ControllerRevision = {
      metadata: { labels: { [labels.revision]: "a" } },
      data: { spec },
      revision: 1,
    };
    assert.equal(historyEntries([legacy], undefined)[0]?.modelURI, shown);
  });
});

describe("status and Events of a model whose URI has credentials in it", () => {
  const m = model(spec);
  const plan = planModel(m, tf);
  const jobName = plan.source.type === "download" ? plan.source.jobName : "";
  const observed = (extra: Partial<Observed>): Observed => ({
    model: m,
    now: "2025-01-01T00:00:00Z",
    plan,
    missing: [],
    jobPods: [],
    pods: [],
    ...extra,
  });
  const job = (conditions: { type: string; status: string; reason?: string }[], active = 0): V1Job => ({
    metadata: { name: jobName },
    status: { conditions, active },
  });

  it("a running download says which URI, redacted, in status and its Event", () => {
    const status = computeStatus(observed({ job: job([], 1), jobPods: [{ status: { phase: "Running" } }] }));
    assert.equal(status.message, `Job ${jobName} is downloading ${shown}`);
    // An Event for it is recorded when it ends a problem (the Secret was missing).
    const event = transitionEvent({ phase: "Pending", reason: "SecretNotFound" }, status);
    assert.ok(event?.message.includes(shown));
    assert.ok(!JSON.stringify([status, event]).includes(canary));
  });

  it("a failed download quotes the downloader's message redacted, even when it was not", () => {
    const pod = {
      metadata: { name: "p", labels: { "job-name": jobName }, creationTimestamp: new Date() },
      status: {
        containerStatuses: [
          {
            name: "download",
            image: "i",
            imageID: "",
            ready: false,
            restartCount: 0,
            state: { terminated: { exitCode: 1, message: `${signed}: AccessDenied: HTTP 403` } },
          },
        ],
      },
    };
    const status = computeStatus(
      observed({
        job: job([{ type: "Failed", status: "True", reason: "PodFailurePolicy" }]),
        jobPods: [pod],
      }),
    );
    assert.equal(status.phase, "Failed");
    assert.match(status.message ?? "", /AccessDenied: HTTP 403/);
    assert.ok(!JSON.stringify(status).includes(canary), JSON.stringify(status));
  });

  it("the revision history in status shows it redacted, and cleans entries an older operator wrote", () => {
    const old: MLModelStatus = { revision: { history: [{ revision: "old", modelURI: signed }] } };
    const ready = computeStatus(
      observed({
        model: { ...m, status: old },
        revision: "new",
        deployment: {
          metadata: { name: "resnet", generation: 1 },
          spec: { replicas: 0 } as never,
          status: { observedGeneration: 1 },
        },
        job: job([{ type: "Complete", status: "True" }]),
      }),
    );
    const uris = (ready.revision?.history ?? []).map((h) => h.modelURI);
    assert.ok(uris.length >= 1);
    for (const uri of uris) assert.ok(!uri?.includes(canary), `${uri}`);
  });
});
