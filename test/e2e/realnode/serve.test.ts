// test-needs: real-node, images
/**
 * A real model on a real node, the whole way: a scikit-learn model trained by the test (in a pod
 * of the MLServer image), packed as tar.gz and served over HTTPS from this machine with its
 * sha256; an MLModel with `format: sklearn`, `uri` and `sha256` goes Pending (its CA Secret is not
 * there yet) -> Downloading (live progress from the real download Job: bytesDone grows) ->
 * Deploying -> Ready, and a V2 inference request through the Service in its status returns
 * exactly what scikit-learn predicted. Every pod ran in a namespace that enforces the restricted
 * Pod Security level. Deleting the model removes every child, the volume (PersistentVolume and
 * the node's directory) and so the model's files.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import type { V1Pod } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import type { SampleModel } from "../../../src/images/sample-model.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { waitFor } from "../../harness/cluster.ts";
import { volumeDir } from "../../harness/realnode.ts";
import { leftovers, waitForPhase } from "../operator/helpers.ts";
import {
  applyCaSecret,
  applyModel,
  caSecretName,
  endpointOf,
  firstAnswer,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  recordStatuses,
  removeRealNodeBed,
  sklearnModel,
} from "./fixture.ts";

// 400 kB at 40 kB/s: about ten seconds of download, so that several progress reports (every
// 2 s at most) come from the Job while it runs.
const paddingBytes = 400_000;
const bytesPerSecond = 40_000;

describe("a scikit-learn model served on a real node", () => {
  let bed: RealNodeBed;
  let sample: SampleModel & { uri: string };
  let ready: MLModel;

  before(async () => {
    bed = await realNodeBed("rn-serve", { bytesPerSecond });
    sample = await publishSample(bed, "iris-v1.tgz", { paddingBytes });
  });
  after(() => removeRealNodeBed(bed));

  it("goes Pending -> Downloading (live progress) -> Deploying -> Ready, and answers as scikit-learn does", async () => {
    const recorder = recordStatuses(bed, "iris");
    let readyRv: string | undefined;
    try {
      // The CA Secret comes second, as a user's often does: the model waits for it.
      await applyModel(bed, sklearnModel("iris", sample));
      const pending = await waitForPhase(bed.admin, bed.ns.name, "iris", "Pending");
      assert.match(pending.status?.message ?? "", new RegExp(caSecretName));
      await applyCaSecret(bed);
      ready = await waitForPhase(bed.admin, bed.ns.name, "iris", "Ready", undefined, 600_000);
      readyRv = ready.metadata.resourceVersion;
    } finally {
      await recorder.stop(readyRv);
    }
    const phases = recorder.statuses.map((s) => s.phase).filter((p, i, all) => p && p !== all[i - 1]);
    assert.deepEqual(phases, ["Pending", "Downloading", "Deploying", "Ready"]);

    // Progress came from the Job's pod while it ran: several reports, each further along.
    const total = sample.archive.length;
    const progress = recorder.statuses
      .filter((s) => s.phase === "Downloading" && s.download?.bytesDone !== undefined)
      .map((s) => s.download!.bytesDone!)
      .filter((b, i, all) => b !== all[i - 1]);
    const partial = progress.filter((b) => b > 0 && b < total);
    assert.ok(partial.length >= 2, `bytesDone while downloading: ${progress.join(", ")} of ${total}`);
    assert.deepEqual(
      progress,
      [...progress].sort((a, b) => a - b),
      "bytesDone only grows",
    );
    assert.equal(ready.status?.download?.bytesDone, total);
    assert.equal(ready.status?.download?.phase, "Complete");
    assert.equal(bed.files.requests.get("/iris-v1.tgz"), 1, "downloaded once");

    const endpoint = await endpointOf(bed, ready);
    assert.match(ready.status?.url ?? "", /^http:\/\/iris\.rn-serve-[0-9a-f]+\.svc:8080$/);
    const answer = await firstAnswer(endpoint, sample);
    assert.deepEqual(
      answer.data,
      sample.predictions,
      "the predictions scikit-learn made where it was trained",
    );
  });

  it("ran every pod at the restricted level: the download Job as uid 1000 on a read-only root, the server too", async () => {
    const namespace = await bed.admin.get<KubeObject>(builtinKinds.Namespace, { name: bed.ns.name });
    assert.equal(namespace?.metadata.labels?.["pod-security.kubernetes.io/enforce"], "restricted");
    const pods = (
      await bed.admin.list(builtinKinds.Pod, {
        namespace: bed.ns.name,
        labelSelector: "serving.mlmodel.dev/model=iris",
      })
    ).items as unknown as V1Pod[];
    const component = (name: string) =>
      pods.find((p) => p.metadata?.labels?.["app.kubernetes.io/component"] === name);
    const download = component("download");
    const server = component("server");
    assert.equal(download?.status?.phase, "Succeeded", "the real download finished in its pod");
    assert.equal(download?.spec?.containers[0]?.securityContext?.readOnlyRootFilesystem, true);
    assert.equal(server?.status?.phase, "Running");
    for (const pod of [download, server]) {
      assert.equal(pod?.spec?.securityContext?.runAsUser, 1000);
      assert.equal(pod?.spec?.securityContext?.runAsNonRoot, true);
      assert.deepEqual(pod?.spec?.containers[0]?.securityContext?.capabilities, { drop: ["ALL"] });
      assert.equal(pod?.spec?.nodeName, bed.cluster.state.realNode!.nodeName, "a real pod, not kwok's");
    }
  });

  it("deleting the model removes every child, the volume and the model's files", async () => {
    const claim = await waitFor("the model's claim", async () =>
      (
        await bed.admin.list<KubeObject & { spec: { volumeName?: string } }>(
          builtinKinds.PersistentVolumeClaim,
          {
            namespace: bed.ns.name,
            labelSelector: "serving.mlmodel.dev/model=iris",
          },
        )
      ).items.at(0),
    );
    const pv = claim.spec.volumeName!;
    const dir = volumeDir(bed.cluster, pv, bed.ns.name, claim.metadata.name!);
    const modelDirs = readdirSync(dir).filter((d) => !d.startsWith("."));
    assert.equal(modelDirs.length, 1, `one model directory in ${dir}: ${modelDirs.join(", ")}`);
    assert.ok(existsSync(`${dir}/${modelDirs[0]}/model.joblib`), "the model's files are on the node");

    await bed.admin.delete(mlModelKind, { namespace: bed.ns.name, name: "iris" });
    await waitFor(
      "every child, the volume and its directory to be gone",
      async () => {
        const left = await leftovers(bed.admin, bed.ns.name, "iris");
        const revisions = await bed.admin.list(builtinKinds.ControllerRevision, {
          namespace: bed.ns.name,
          labelSelector: "serving.mlmodel.dev/model=iris",
        });
        const identity = await bed.admin.list(builtinKinds.ServiceAccount, {
          namespace: bed.ns.name,
          labelSelector: "serving.mlmodel.dev/model=iris",
        });
        const volume = await bed.admin.get(builtinKinds.PersistentVolume, { name: pv });
        return (
          left.length === 0 &&
          revisions.items.length === 0 &&
          identity.items.length === 0 &&
          volume === undefined &&
          !existsSync(dir)
        );
      },
      { timeoutMs: 180_000, intervalMs: 500 },
    );
  });
});
