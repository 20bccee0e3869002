// The grants `up` makes on a fresh API server, made again on one that has them: a start over
// after a port conflict meets its first attempt's objects in the same etcd.
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it } from "node:test";
import { RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { grantKwok, kwokRbac } from "../../../src/cluster/bootstrap.ts";
import { kubeConfig, localCluster } from "../../harness/cluster.ts";

describe("kwok's grant on an API server that has it already", () => {
  it("keeps the ClusterRole and its binding instead of failing with AlreadyExists", async () => {
    const cluster = localCluster();
    assert.ok(cluster, "runs on the test run's cluster (MLMODEL_TEST_CLUSTER_DIR)");
    const rbac = kubeConfig().makeApiClient(RbacAuthorizationV1Api);
    const { role } = kwokRbac();
    await grantKwok(join(cluster.dir, "admin.kubeconfig"));
    const after = await rbac.readClusterRole({ name: role.metadata!.name! });
    // The client leaves unset fields as undefined properties: compare what JSON would carry.
    const plain = (value: unknown) => JSON.parse(JSON.stringify(value));
    assert.deepEqual(plain(after.rules), plain(role.rules), "this version's rules");
    const binding = await rbac.readClusterRoleBinding({ name: role.metadata!.name! });
    assert.deepEqual(plain(binding.subjects), plain(kwokRbac().binding.subjects));
  });
});
