// The fault-injection tools that reliability tests rely on do what they say.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CoreV1Api } from "@kubernetes/client-node";
import { type PrivateCluster, startPrivateCluster, waitFor } from "../../harness/cluster.ts";

describe("fault injection on a private cluster", () => {
  let cluster: PrivateCluster;
  before(async () => {
    cluster = await startPrivateCluster("faults");
  });
  after(async () => {
    await cluster?.stop();
  });

  it("restarts the API server on the same port with the same data", async () => {
    const core = cluster.kubeConfig().makeApiClient(CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: "default", body: { metadata: { name: "survivor" } } });
    await cluster.restartApiServer(500);
    const survivor = await waitFor("the API server to answer again", () =>
      core.readNamespacedConfigMap({ name: "survivor", namespace: "default" }),
    );
    assert.equal(survivor.metadata?.name, "survivor");
  });

  it("compacts etcd so that, once the API server's watch cache restarts, an old resourceVersion gets 410 Gone", async () => {
    const core = cluster.kubeConfig().makeApiClient(CoreV1Api);
    const list = await core.listNamespacedConfigMap({ namespace: "default" });
    const oldVersion = list.metadata!.resourceVersion!;
    for (let i = 0; i < 3; i++) {
      await core.createNamespacedConfigMap({
        namespace: "default",
        body: { metadata: { name: `churn-${i}` } },
      });
    }
    await cluster.compactEtcd();
    // The API server's watch cache still remembers recent versions; a restart empties it, so
    // the read at the old version has to go to etcd, which has compacted it away.
    await cluster.restartApiServer();
    await assert.rejects(
      core.listNamespacedConfigMap({
        namespace: "default",
        resourceVersion: oldVersion,
        resourceVersionMatch: "Exact",
      }),
      (err: Error) =>
        /410|Expired|too old/i.test(`${(err as { code?: number }).code} ${(err as { body?: string }).body}`),
    );
  });
});
