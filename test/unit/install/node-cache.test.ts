import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1DaemonSet, V1Role, V1Service } from "@kubernetes/client-node";
import { installObjects } from "../../../scripts/gen-install.ts";
import { rbacManifests } from "../../../src/install/manifests.ts";
import {
  nodeCacheManifests,
  nodeCacheRules,
  operatorNodeCacheRoleName,
  operatorNodeCacheRules,
} from "../../../src/install/node-cache.ts";
import {
  nodeCacheAgentCommand,
  nodeCacheComponentLabels,
  nodeCachePort,
  nodeCacheServiceName,
} from "../../../src/nodecache/contract.ts";
import { restrictedViolations } from "../operator/restricted.ts";

const objects = nodeCacheManifests({ namespace: "ops", image: "example.com/mlmodel:2", budget: "20Gi" });
const find = <T>(kind: string) => objects.find((o) => o.kind === kind) as unknown as T;

describe("the node cache's install objects", () => {
  it("run the agent per node at the restricted level, with its node and namespace from the downward API", () => {
    const ds = find<V1DaemonSet>("DaemonSet");
    assert.equal(ds.metadata?.namespace, "ops");
    const pod = ds.spec!.template.spec!;
    assert.deepEqual(restrictedViolations(pod), []);
    const agent = pod.containers[0]!;
    assert.equal(agent.image, "example.com/mlmodel:2");
    assert.deepEqual(agent.command, [...nodeCacheAgentCommand]);
    const budget = agent.args!.indexOf("--budget");
    assert.equal(agent.args![budget + 1], "20Gi");
    assert.deepEqual(
      agent.env?.map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath]),
      [
        ["NODE_NAME", "spec.nodeName"],
        ["POD_NAMESPACE", "metadata.namespace"],
      ],
    );
    assert.deepEqual(agent.readinessProbe?.httpGet, { path: "/healthz", port: "http" });
    assert.equal(agent.ports?.[0]?.containerPort, nodeCachePort);
    assert.equal(agent.securityContext?.readOnlyRootFilesystem, true);
    const cache = pod.volumes?.find((v) => v.name === "cache");
    assert.deepEqual(cache, { name: "cache", emptyDir: { sizeLimit: "20Gi" } }, "the budget bounds the disk");
    assert.ok(!pod.volumes?.some((v) => "hostPath" in v), "no hostPath");
    assert.deepEqual(ds.spec?.selector?.matchLabels, nodeCacheComponentLabels);
  });

  it("give every pod its own node's agent at one ClusterIP", () => {
    const svc = find<V1Service>("Service");
    assert.equal(svc.metadata?.name, nodeCacheServiceName);
    assert.equal(svc.spec?.internalTrafficPolicy, "Local");
    assert.deepEqual(svc.spec?.selector, nodeCacheComponentLabels);
    assert.equal(svc.spec?.ports?.[0]?.port, nodeCachePort);
  });

  it("grant the agent its peers and its state in its namespace, and pods (metadata) cluster-wide", () => {
    const role = objects.find((o) => o.kind === "Role") as unknown as V1Role;
    assert.equal(role.metadata?.namespace, "ops");
    assert.deepEqual(role.rules, nodeCacheRules.namespaced);
    assert.deepEqual(
      role.rules?.map((r) => [r.resources?.join(), r.verbs.join()]),
      [
        ["endpointslices", "list,watch"],
        ["configmaps", "create,get,patch,update"],
      ],
    );
    const cluster = objects.find((o) => o.kind === "ClusterRole") as unknown as V1Role;
    assert.deepEqual(
      cluster.rules?.map((r) => [r.resources?.join(), r.verbs.join()]),
      [["pods", "list,watch"]],
    );
    // Cluster-scoped, so named by the install's namespace: two installs do not claim one object.
    const clusterScoped = (ns: string) =>
      nodeCacheManifests({ namespace: ns })
        .filter((o) => o.kind.startsWith("Cluster"))
        .map((o) => o.metadata.name);
    assert.deepEqual(clusterScoped("ops"), ["mlmodel-node-cache-ops", "mlmodel-node-cache-ops"]);
    assert.deepEqual(clusterScoped("ops-2"), ["mlmodel-node-cache-ops-2", "mlmodel-node-cache-ops-2"]);
    const bindings = objects.filter((o) => o.kind.endsWith("Binding")) as unknown as {
      subjects: { name: string; namespace: string }[];
    }[];
    assert.equal(bindings.length, 2);
    for (const b of bindings)
      assert.deepEqual(b.subjects[0], {
        kind: "ServiceAccount",
        name: nodeCacheServiceName,
        namespace: "ops",
      });
  });

  it("give the operator a get of that one Service and the agents' states in its namespace", () => {
    const role = rbacManifests("ops").find(
      (o) => o.kind === "Role" && o.metadata.name === operatorNodeCacheRoleName,
    ) as unknown as V1Role;
    assert.equal(role.metadata?.namespace, "ops");
    assert.deepEqual(role.rules, operatorNodeCacheRules);
    const get = role.rules?.find((r) => r.resources?.includes("services"));
    assert.deepEqual(get?.resourceNames, [nodeCacheServiceName]);
    assert.deepEqual(get?.verbs, ["get"]);
  });

  it("are in dist/install.yaml before the manager, which looks for them when it starts", () => {
    const kinds = installObjects().map((o) => `${o.kind}/${o.metadata.name}`);
    const daemonSet = kinds.indexOf(`DaemonSet/${nodeCacheServiceName}`);
    assert.ok(daemonSet > 0);
    assert.ok(daemonSet < kinds.indexOf("Deployment/mlmodel-operator"));
  });
});
