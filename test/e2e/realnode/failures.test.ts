// test-needs: real-node, images
/**
 * Failures that are real on a real node, each reported with a clear condition: a wrong sha256
 * (the real download Job fails, naming both digests), an unreachable host (nothing listens
 * there), an image that is not present (a real ErrImagePull / ImagePullBackOff from containerd,
 * whose pulls never leave this machine), a memory limit too small for the model (a real OOM kill).
 */
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, before, describe, it } from "node:test";
import type { V1Pod } from "@kubernetes/client-node";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { listenForPods } from "../../../src/cluster/index.ts";
import type { SampleModel } from "../../../src/images/sample-model.ts";
import { builtinKinds } from "../../../src/runtime/index.ts";
import { waitFor } from "../../harness/cluster.ts";
import {
  applyCaSecret,
  applyModel,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  removeRealNodeBed,
  sklearnModel,
  waitForModel,
} from "./fixture.ts";

/**
 * A port on `host` where nothing listens (bound, then let go), among those pods may reach: the
 * node refuses the connection there, where the guard would drop it anywhere else.
 */
async function closedPort(host: string): Promise<number> {
  const server = createServer();
  const port = await listenForPods(server, host);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const condition = (m: MLModel, type: string) => m.status?.conditions?.find((c) => c.type === type);

describe("real failures on a real node, each with a clear condition", { concurrency: true }, () => {
  let bed: RealNodeBed;
  let sample: SampleModel & { uri: string };

  before(async () => {
    bed = await realNodeBed("rn-failures");
    sample = await publishSample(bed, "iris.tgz");
    await applyCaSecret(bed);
  });
  after(() => removeRealNodeBed(bed));

  it("a wrong sha256: the download fails naming both digests", async () => {
    const wrong = "0".repeat(64);
    await applyModel(bed, sklearnModel("wrong-sha", { uri: sample.uri, sha256: wrong }));
    const failed = await waitForModel(
      bed,
      "wrong-sha",
      "Failed/DownloadFailed",
      (m) => m.status?.reason === "DownloadFailed",
    );
    assert.equal(failed.status?.phase, "Failed");
    const downloaded = condition(failed, "ModelDownloaded");
    assert.equal(downloaded?.status, "False");
    assert.equal(downloaded?.reason, "DownloadFailed");
    assert.match(downloaded?.message ?? "", /ChecksumMismatch/);
    assert.match(downloaded?.message ?? "", new RegExp(wrong), "the digest asked for");
    assert.match(downloaded?.message ?? "", new RegExp(sample.sha256), "the digest the bytes have");
  });

  it("an unreachable host: the download fails saying it could not connect", async () => {
    const uri = `https://${bed.cluster.nodeIp}:${await closedPort(bed.cluster.nodeIp)}/iris.tgz`;
    await applyModel(bed, sklearnModel("unreachable", { uri, sha256: sample.sha256 }));
    const failed = await waitForModel(
      bed,
      "unreachable",
      "Failed/DownloadFailed",
      (m) => m.status?.reason === "DownloadFailed",
    );
    const message = condition(failed, "ModelDownloaded")?.message ?? "";
    assert.match(message, /NetworkError/);
    assert.match(message, /ECONNREFUSED|connection refused/i);
    assert.match(message, new RegExp(uri.replaceAll(".", "\\.")));
  });

  it("an image that is not present: a real ErrImagePull / ImagePullBackOff, the pull refused on this machine", async () => {
    const image = "127.0.0.1:1/missing:v1";
    await applyModel(bed, sklearnModel("no-image", sample, { image }));
    const failed = await waitForModel(
      bed,
      "no-image",
      "ImagePullBackOff",
      (m) => m.status?.reason === "ImagePullBackOff",
    );
    assert.equal(failed.status?.phase, "Failed");
    const serving = condition(failed, "ServingReady");
    assert.equal(serving?.reason, "ImagePullBackOff");
    assert.match(
      serving?.message ?? "",
      /cannot pull image "127\.0\.0\.1:1\/missing:v1" \((ErrImagePull|ImagePullBackOff)/,
    );
    assert.match(serving?.message ?? "", /connection refused/);
  });

  it("the node's containerd sends every pull to a refusing loopback proxy: no pull can reach a registry off this machine", async () => {
    // A registry at the node's own address: not loopback, so Go sends it to the proxy. (Were the
    // proxy not set, the pull would still only reach our bridge, where nothing listens.)
    const image = `${bed.cluster.nodeIp}:1/missing:v1`;
    await bed.admin.apply(
      builtinKinds.Pod,
      {
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: "pull-probe", namespace: bed.ns.name },
        spec: {
          securityContext: {
            runAsNonRoot: true,
            runAsUser: 1000,
            seccompProfile: { type: "RuntimeDefault" },
          },
          containers: [
            {
              name: "c",
              image,
              securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
            },
          ],
        },
      },
      { fieldManager: "e2e", force: true },
    );
    const message = await waitFor("the pull to fail", async () => {
      const pod = (await bed.admin.get(builtinKinds.Pod, { namespace: bed.ns.name, name: "pull-probe" })) as
        | V1Pod
        | undefined;
      const waiting = pod?.status?.containerStatuses?.[0]?.state?.waiting;
      return waiting?.reason === "ErrImagePull" || waiting?.reason === "ImagePullBackOff"
        ? String(waiting.message)
        : undefined;
    });
    assert.match(message, /proxyconnect tcp: dial tcp 127\.0\.0\.1:1: connect: connection refused/, message);
  });

  it("a memory limit too small for the model: a real OOM kill, named in the status", async () => {
    await applyModel(bed, sklearnModel("small", sample, { resources: { limits: { memory: "64Mi" } } }));
    const failed = await waitForModel(
      bed,
      "small",
      "CrashLoopBackOff",
      (m) => m.status?.reason === "CrashLoopBackOff",
    );
    assert.equal(failed.status?.phase, "Failed");
    const serving = condition(failed, "ServingReady");
    assert.equal(serving?.reason, "CrashLoopBackOff");
    assert.match(serving?.message ?? "", /OOMKilled/, serving?.message);
    assert.match(serving?.message ?? "", /exit code 137/);
  });
});
