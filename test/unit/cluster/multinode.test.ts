// Several real nodes' pure parts: each node's identity and settings, its network plan, the
// provisioner's classes, the drain's choice of pods, the per-node certificates. The nodes
// themselves are tested in test/e2e/multinode.
import assert from "node:assert/strict";
import { webcrypto } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { parse } from "yaml";
import { run as clusterCommand } from "../../../src/cli/commands/cluster.ts";
import { CliError } from "../../../src/cli/errors.ts";
import { ClusterError, realNodeCount } from "../../../src/cluster/cluster.ts";
import { loadCa, memberCredentials } from "../../../src/cluster/node/certs.ts";
import { fleetPaths, memberOf, multiNodeDefaults, nodePaths } from "../../../src/cluster/node/config.ts";
import { podsToEvict } from "../../../src/cluster/node/drain.ts";
import { memberLayout, withServer } from "../../../src/cluster/node/fleet.ts";
import { memberNetworkScript } from "../../../src/cluster/node/network.ts";
import type { FleetJournal } from "../../../src/cluster/node/node.ts";
import {
  cniConfig,
  containerdConfig,
  fleetProvisionerConfig,
  kubeletArgs,
  kubeletConfig,
  kubeProxyConfig,
  type NodeLayout,
} from "../../../src/cluster/node/render.ts";
import { generatePki } from "../../../src/cluster/pki.ts";
import { scratchDir } from "../../harness/scratch.ts";

const ports = {
  kubelet: 20250,
  kubeletHealthz: 20248,
  kubeProxyHealthz: 20256,
  kubeProxyMetrics: 20249,
  containerdMetrics: 20338,
};

/** Node `index`'s layout as `up` renders it, from a journal with only what the layout reads. */
function layoutOf(index: number): NodeLayout {
  const member = {
    ...memberOf(index),
    root: fleetPaths("/state/c1").member(index).root,
    netns: "",
    processes: [],
  };
  const journal = { ports } as unknown as FleetJournal;
  const image = (name: string) => ({ name, archive: "" });
  const images = { pause: image("mlmodel.local/pause:abc"), busybox: image("mlmodel.local/busybox:1.35.0") };
  return memberLayout(journal, member, images, "/state/c1/pki/ca.crt");
}

describe("the nodes of a multi-node cluster", () => {
  it("each have a name, address, pod CIDR, cgroup and veth of their own, zones round-robin", () => {
    const members = [1, 2, 3, 4].map(memberOf);
    for (const key of ["name", "nodeIp", "podCidr", "podGateway", "cgroupRoot", "hostVeth"] as const)
      assert.equal(new Set(members.map((m) => m[key])).size, 4, key);
    assert.deepEqual(
      members.map((m) => m.name),
      ["mlmodel-node-1", "mlmodel-node-2", "mlmodel-node-3", "mlmodel-node-4"],
    );
    assert.deepEqual(
      members.map((m) => m.zone),
      ["zone-a", "zone-b", "zone-c", "zone-a"],
    );
    // Linux link names have at most 15 characters.
    for (const m of members) assert.ok(m.hostVeth.length <= 15, m.hostVeth);
    // Pod CIDRs inside the cluster's, node addresses on the node network, none the host's.
    for (const m of members) {
      assert.match(m.podCidr, /^10\.77\.\d+\.0\/24$/);
      assert.match(m.nodeIp, /^10\.78\.0\.\d+$/);
      assert.notEqual(m.nodeIp, multiNodeDefaults.hostIp);
    }
    // The one real node's pod CIDR (10.77.0.0/24) is none of theirs.
    assert.ok(!members.some((m) => m.podCidr === "10.77.0.0/24"));
  });

  it("keep their state in directories of their own", () => {
    const [one, two] = [fleetPaths("/c").member(1), fleetPaths("/c").member(2)];
    assert.equal(one.containerdSocket, "/c/nodes/node-1/containerd/containerd.sock");
    assert.equal(one.netns, "/c/nodes/node-1/netns");
    for (const key of ["containerdRoot", "kubeletRoot", "cniIpamDir", "volumes", "podLogs"] as const)
      assert.notEqual(one[key], two[key], key);
    assert.notEqual(one.root, nodePaths("/c").root);
  });

  it("serve health on their own address (their loopback is their namespace's), pods in their own cgroup", () => {
    const layout = layoutOf(2);
    const kubelet = parse(kubeletConfig(layout));
    assert.equal(kubelet.healthzBindAddress, "10.78.0.12");
    assert.equal(kubelet.address, "10.78.0.12");
    assert.equal(kubelet.cgroupRoot, "/mlmodel-node-2");
    const proxy = parse(kubeProxyConfig(layout));
    assert.equal(proxy.clusterCIDR, multiNodeDefaults.clusterPodCidr);
    assert.equal(proxy.healthzBindAddress, `10.78.0.12:${ports.kubeProxyHealthz}`);
    assert.deepEqual(proxy.nodePortAddresses, ["10.78.0.12/32"]);
    assert.match(containerdConfig(layout), /address = "10\.78\.0\.12:20338"/);
    assert.ok(
      kubeletArgs(layout).includes(
        "--node-labels=mlmodel.dev/real-node=true,topology.kubernetes.io/zone=zone-b",
      ),
    );
    assert.ok(kubeletArgs(layout).includes("--hostname-override=mlmodel-node-2"));
  });

  it("give pods their node's subnet and routes to the other nodes' pods and the host, never a default route", () => {
    const cni = JSON.parse(cniConfig(layoutOf(3)));
    const ipam = cni.plugins[0].ipam;
    assert.deepEqual(ipam.ranges, [[{ subnet: "10.77.3.0/24", gateway: "10.77.3.1" }]]);
    assert.deepEqual(
      ipam.routes.map((r: { dst: string }) => r.dst),
      ["10.96.0.0/16", multiNodeDefaults.clusterPodCidr, multiNodeDefaults.nodeNetwork],
    );
    assert.ok(!ipam.routes.some((r: { dst: string }) => r.dst === "0.0.0.0/0"));
    assert.equal(cni.plugins[0].ipMasq, false);
  });

  it("route each other node's pods through that node, with no default route in the namespace", () => {
    const members = [1, 2, 3].map((i) => ({ ...memberOf(i), netns: `/c/nodes/node-${i}/netns` }));
    const script = memberNetworkScript(members[0]!, members.slice(1), "24");
    assert.match(script, /^ip addr add 10\.78\.0\.11\/24 dev eth0$/m);
    assert.match(script, /^ip route add 10\.77\.2\.0\/24 via 10\.78\.0\.12 dev eth0$/m);
    assert.match(script, /^ip route add 10\.77\.3\.0\/24 via 10\.78\.0\.13 dev eth0$/m);
    assert.match(script, /ip_forward/);
    assert.doesNotMatch(script, /default/);
    assert.doesNotMatch(script, /10\.77\.1\.0/, "no route to its own pods through another node");
  });

  it("offer a node-local class and a shared one from one provisioner", () => {
    const config = JSON.parse(
      fleetProvisionerConfig({ "mlmodel-node-1": "/v1", "mlmodel-node-2": "/v2" }, "/shared"),
    );
    assert.deepEqual(config.storageClassConfigs[multiNodeDefaults.localStorageClass], {
      nodePathMap: [
        { node: "mlmodel-node-1", paths: ["/v1"] },
        { node: "mlmodel-node-2", paths: ["/v2"] },
      ],
    });
    assert.deepEqual(config.storageClassConfigs[multiNodeDefaults.sharedStorageClass], {
      sharedFileSystemPath: "/shared",
    });
  });

  it("reach the API server at the host's address (a kubeconfig's server rewritten, the rest kept)", () => {
    const original =
      "apiVersion: v1\nkind: Config\nclusters:\n  - name: c\n    cluster:\n      server: https://127.0.0.1:6443\n      certificate-authority-data: QQ==\nusers: []\n";
    const rewritten = parse(withServer(original, "https://10.78.0.1:6443"));
    assert.equal(rewritten.clusters[0].cluster.server, "https://10.78.0.1:6443");
    assert.equal(rewritten.clusters[0].cluster["certificate-authority-data"], "QQ==");
  });

  it("get certificates of their own from the cluster CA: kubelet's serving one names the node's address", async () => {
    const dir = scratchDir("multinode-certs");
    const pki = await generatePki({ nodeName: "mlmodel-node-1", nodeIp: multiNodeDefaults.hostIp });
    writeFileSync(join(dir, "ca.crt"), pki.ca.certPem);
    writeFileSync(join(dir, "ca.key"), pki.ca.keyPem);
    const ca = await loadCa(join(dir, "ca.crt"), join(dir, "ca.key"));
    const member = memberOf(2);
    const credentials = await memberCredentials(ca, member, "https://10.78.0.1:6443");
    const serving = new x509.X509Certificate(credentials.kubeletServing.certPem);
    assert.equal(serving.subject, "CN=system:node:mlmodel-node-2, O=system:nodes");
    const san = serving.getExtension(x509.SubjectAlternativeNameExtension);
    assert.ok(san?.names.items.some((n) => n.type === "ip" && n.value === member.nodeIp));
    const caCert = new x509.X509Certificate(pki.ca.certPem);
    assert.ok(await serving.verify({ publicKey: caCert.publicKey, signatureOnly: true }, webcrypto as never));
    const kubeconfig = parse(credentials.kubeletKubeconfig);
    assert.equal(kubeconfig.clusters[0].cluster.server, "https://10.78.0.1:6443");
    const client = new x509.X509Certificate(
      Buffer.from(kubeconfig.users[0].user["client-certificate-data"], "base64").toString(),
    );
    assert.equal(client.subject, "CN=system:node:mlmodel-node-2, O=system:nodes");
    // The API server's own certificate names the host's address: nodes dial it there.
    const apiserver = new x509.X509Certificate(pki.apiserver.certPem);
    assert.ok(
      apiserver
        .getExtension(x509.SubjectAlternativeNameExtension)
        ?.names.items.some((n) => n.type === "ip" && n.value === multiNodeDefaults.hostIp),
    );
  });
});

describe("up's count of real nodes", () => {
  it("is 0 without a real node, 1 with --real-node, N with realNodes", () => {
    assert.equal(realNodeCount({}), 0);
    assert.equal(realNodeCount({ realNode: true }), 1);
    assert.equal(realNodeCount({ realNodes: 3 }), 3);
    assert.equal(realNodeCount({ realNode: true, realNodes: 4 }), 4);
  });

  it("names the field, the value and the range when it is out of range", () => {
    for (const bad of [0, 5, 2.5])
      assert.throws(
        () => realNodeCount({ realNodes: bad }),
        (err: Error) => {
          assert.ok(err instanceof ClusterError);
          assert.match(err.message, new RegExp(`realNodes must be a whole number from 1 to 4, not ${bad}`));
          return true;
        },
      );
    assert.throws(
      () => realNodeCount({ realNode: false, realNodes: 2 }),
      /realNode: false contradicts realNodes: 2/,
    );
  });
});

describe("drain", () => {
  const pod = (name: string, extra: Record<string, unknown> = {}) => ({ metadata: { name, ...extra } });
  it("evicts every unfinished pod except mirror and DaemonSet pods", () => {
    const pods = [
      pod("web"),
      pod("mirror", { annotations: { "kubernetes.io/config.mirror": "x" } }),
      pod("agent", { ownerReferences: [{ kind: "DaemonSet", name: "d", apiVersion: "apps/v1", uid: "1" }] }),
      { ...pod("done"), status: { phase: "Succeeded" } },
      { ...pod("crashed"), status: { phase: "Failed" } },
      pod("owned", { ownerReferences: [{ kind: "ReplicaSet", name: "r", apiVersion: "apps/v1", uid: "2" }] }),
    ];
    assert.deepEqual(
      podsToEvict(pods).map((p) => p.metadata?.name),
      ["web", "owned"],
    );
  });
});

describe("mlmodel cluster's flags and verbs for several nodes", () => {
  const refused = async (argv: string[], message: RegExp) =>
    assert.rejects(clusterCommand([...argv, "--dir", scratchDir("multinode-cli")]), (err: Error) => {
      assert.ok(err instanceof CliError, err.message);
      assert.match(err.message, message);
      return true;
    });

  it("refuses a node count out of range, naming the flag, the value and the range", async () => {
    await refused(["up", "--real-nodes", "5"], /--real-nodes must be a whole number from 1 to 4, not "5"/);
    await refused(
      ["up", "--real-nodes", "two"],
      /--real-nodes must be a whole number from 1 to 4, not "two"/,
    );
  });

  it("refuses --real-node with --real-nodes", async () => {
    await refused(["up", "--real-node", "--real-nodes", "2"], /--real-node or --real-nodes N, not both/);
  });

  it("refuses an unknown node verb or a missing node name, listing the verbs", async () => {
    await refused(
      ["node", "explode", "mlmodel-node-1"],
      /drain\|cordon\|uncordon\|stop\|start\|partition\|heal NAME/,
    );
    await refused(["node", "stop"], /usage: mlmodel cluster node/);
  });

  it("says there is no cluster rather than acting on nothing", async () => {
    await refused(["node", "stop", "mlmodel-node-1"], /no cluster in /);
  });
});
