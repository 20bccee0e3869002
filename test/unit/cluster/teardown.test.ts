// What the real node's teardown takes from its journal and what it removes, without root: the
// journal's checks, "only what the node made" for chains and netns, steps that run whatever the
// one before did, the policy that keeps apt-get from starting services, the volumes' mode and
// the ports pods may reach. The teardown itself is tested in test/integration/realnode.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import type { KubernetesObject } from "@kubernetes/client-node";
import { ourPolicyRcd, withoutServiceStarts } from "../../../src/cluster/apt.ts";
import {
  multiNodeDefaults,
  podReachableHostPorts,
  touchedSysctls,
} from "../../../src/cluster/node/config.ts";
import { checkedLink, checkedSysctls, netnsToRemove } from "../../../src/cluster/node/journal.ts";
import { keptChains, listenForPods, matchingChains, removalPlan } from "../../../src/cluster/node/network.ts";
import { stepsInto } from "../../../src/cluster/node/node.ts";
import { multiNodeObjects, setupScript } from "../../../src/cluster/node/objects.ts";

describe("the journal, as teardown reads it", () => {
  it("restores only the sysctls the node touches, with values that are numbers", () => {
    const { restore, refused } = checkedSysctls({
      "net.ipv4.ip_forward": "0",
      "kernel.panic": "10",
      "net.netfilter.nf_conntrack_max": "262144",
      "kernel.core_pattern": "|/tmp/x",
      "net/../../../etc/shadow": "0",
      "vm.overcommit_memory": "1; echo owned",
      "vm.panic_on_oom": 1,
    });
    assert.deepEqual(restore, {
      "net.ipv4.ip_forward": "0",
      "kernel.panic": "10",
      "net.netfilter.nf_conntrack_max": "262144",
    });
    assert.equal(refused.length, 4);
    assert.match(refused[0]!, /sysctl "kernel\.core_pattern", which the node never changes .*: left alone/);
    assert.match(refused[1]!, /sysctl "net\/\.\.\/\.\.\/\.\.\/etc\/shadow"/);
    assert.match(refused[2]!, /sysctl vm\.overcommit_memory the value "1; echo owned", not integers/);
    assert.match(refused[3]!, /sysctl vm\.panic_on_oom the value 1,/);
    for (const name of Object.keys(restore)) assert.ok((touchedSysctls as readonly string[]).includes(name));
  });

  it("refuses a sysctls field that is not an object, and takes none from a journal without one", () => {
    assert.deepEqual(checkedSysctls(undefined), { restore: {}, refused: [] });
    const { restore, refused } = checkedSysctls(["net.ipv4.ip_forward"]);
    assert.deepEqual(restore, {});
    assert.match(refused[0]!, /journal field sysctls is \["net\.ipv4\.ip_forward"\], not an object/);
  });

  it("deletes only the node's own bridge, whatever bridge the journal names", () => {
    assert.deepEqual(checkedLink("bridge", "mlmodel0", "mlmodel0"), { link: "mlmodel0" });
    assert.deepEqual(checkedLink("bridge", undefined, "mlmodel0"), { link: "mlmodel0" });
    const forged = checkedLink("hostBridge", "docker0", multiNodeDefaults.hostBridge);
    assert.equal(forged.link, "mlmodel-nodes");
    assert.match(
      forged.refused ?? "",
      /hostBridge names link "docker0", but the node only ever makes mlmodel-nodes/,
    );
  });
});

describe("removing only what the node made", () => {
  const saved = `*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
:CNI-FORWARD - [0:0]
:MLMODEL-INPUT - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -j KUBE-SERVICES
-A INPUT -j MLMODEL-INPUT
-A KUBE-SERVICES -j CNI-FORWARD
COMMIT
*nat
:KUBE-POSTROUTING - [0:0]
COMMIT
`;

  it("records the chains of the node's names that exist, never our own prefix as kept", () => {
    const before = matchingChains(saved);
    assert.deepEqual(before, [
      "filter KUBE-FIREWALL",
      "filter KUBE-SERVICES",
      "filter CNI-FORWARD",
      "filter MLMODEL-INPUT",
      "nat KUBE-POSTROUTING",
    ]);
    assert.deepEqual(keptChains(before), [
      "filter KUBE-FIREWALL",
      "filter KUBE-SERVICES",
      "filter CNI-FORWARD",
      "nat KUBE-POSTROUTING",
    ]);
  });

  it("leaves the chains that existed before, and the jumps to them", () => {
    const keep = new Set(["filter KUBE-FIREWALL", "nat KUBE-POSTROUTING"]);
    const plan = removalPlan(saved, undefined, keep);
    assert.equal(
      plan,
      [
        "*filter",
        "-D INPUT -j KUBE-SERVICES",
        "-D INPUT -j MLMODEL-INPUT",
        "-F KUBE-SERVICES",
        "-F CNI-FORWARD",
        "-F MLMODEL-INPUT",
        "-X KUBE-SERVICES",
        "-X CNI-FORWARD",
        "-X MLMODEL-INPUT",
        "COMMIT",
        "",
      ].join("\n"),
    );
    assert.doesNotMatch(plan, /KUBE-FIREWALL|KUBE-POSTROUTING|\*nat/);
  });

  it("removes nothing when every chain of those names was there before", () => {
    const everything = new Set(matchingChains(saved));
    assert.equal(removalPlan(saved, undefined, everything), "");
  });

  it("removes only the pod network namespaces that appeared after `up`", () => {
    const before = ["cni-1111", "somebody-elses"];
    const now = ["cni-1111", "cni-2222", "somebody-elses", "mine-not-cni", "cni-3333"];
    assert.deepEqual(netnsToRemove(now, before), ["cni-2222", "cni-3333"]);
    assert.deepEqual(netnsToRemove(["cni-1111"], before), []);
  });
});

describe("teardown steps", () => {
  it("runs every step whatever the ones before did, and reports each problem", async () => {
    const problems: string[] = [];
    const step = stepsInto(problems);
    const ran: string[] = [];
    await step("unmounting", async () => {
      ran.push("unmounting");
      throw Object.assign(new Error("EBUSY: resource busy or locked, rmdir '/run/netns'"), { code: "EBUSY" });
    });
    await step("killing a process", async () => {
      ran.push("killing");
      throw Object.assign(new Error("kill ESRCH"), { code: "ESRCH" });
    });
    await step("removing chains", async () => {
      ran.push("chains");
      problems.push("iptables-restore could not remove the node's chains: busy");
    });
    // What a step returns is no problem (unmountUnder returns what it unmounted).
    await step("unmounting again", async () => {
      ran.push("unmounted");
      return ["/node/containerd/state/rootfs"];
    });
    await step("restoring sysctls", async () => {
      ran.push("sysctls");
    });
    await step("letting go of the lock", async () => {
      ran.push("lock");
      return undefined;
    });
    assert.deepEqual(ran, ["unmounting", "killing", "chains", "unmounted", "sysctls", "lock"]);
    assert.deepEqual(problems, [
      "unmounting: EBUSY: resource busy or locked, rmdir '/run/netns'",
      "killing a process: kill ESRCH",
      "iptables-restore could not remove the node's chains: busy",
    ]);
  });
});

describe("apt-get without service starts", () => {
  const dir = mkdtempSync(join(tmpdir(), "policy-rc-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("forbids every service start while apt-get runs, and removes its policy after", async () => {
    const path = join(dir, "policy-rc.d");
    const { result, policy } = await withoutServiceStarts(path, async () => {
      assert.equal(readFileSync(path, "utf8"), ourPolicyRcd);
      assert.equal(statSync(path).mode & 0o777, 0o755);
      return "installed";
    });
    assert.equal(result, "installed");
    assert.equal(policy, "ours");
    assert.equal(existsSync(path), false);
    assert.match(ourPolicyRcd, /^exit 101$/m, "101: action forbidden");
  });

  it("removes its policy when apt-get fails, and replaces one left by a run that died", async () => {
    const path = join(dir, "policy-rc.d");
    writeFileSync(path, ourPolicyRcd);
    await assert.rejects(
      withoutServiceStarts(path, async () => {
        throw new Error("apt-get failed");
      }),
      /apt-get failed/,
    );
    assert.equal(existsSync(path), false);
  });

  it("keeps its policy while any install of this process runs", async () => {
    const path = join(dir, "policy-rc.d");
    let finishFirst = () => {};
    const first = withoutServiceStarts(path, () => new Promise<void>((resolve) => (finishFirst = resolve)));
    const second = await withoutServiceStarts(path, async () => readFileSync(path, "utf8"));
    assert.equal(second.result, ourPolicyRcd);
    assert.equal(existsSync(path), true, "the first install still runs");
    finishFirst();
    await first;
    assert.equal(existsSync(path), false);
  });

  it("leaves a policy that is not ours as it is", async () => {
    const path = join(dir, "policy-rc.d");
    const theirs = "#!/bin/sh\nexit 0\n";
    writeFileSync(path, theirs);
    const { policy } = await withoutServiceStarts(path, async () => readFileSync(path, "utf8"));
    assert.equal(policy, "theirs");
    assert.equal(readFileSync(path, "utf8"), theirs);
  });
});

describe("volumes and host ports", () => {
  it("makes volume directories that are not world-writable, of a type kubelet gives the pod's fsGroup", () => {
    assert.match(setupScript, /mkdir -m 0770 -p "\$VOL_DIR"/);
    assert.doesNotMatch(setupScript, /0777/);
    const classes = multiNodeObjects().filter((o) => o.kind === "StorageClass") as (KubernetesObject & {
      metadata: { annotations?: Record<string, string> };
    })[];
    const byName = Object.fromEntries(classes.map((c) => [c.metadata.name, c.metadata.annotations ?? {}]));
    assert.equal(byName[multiNodeDefaults.localStorageClass]?.defaultVolumeType, "local");
    // A local volume is pinned to one node: the class every node mounts stays hostPath.
    assert.equal(byName[multiNodeDefaults.sharedStorageClass]?.defaultVolumeType, undefined);
  });

  it("binds host services for pods in the named range, past ports in use", async () => {
    const { first, last } = podReachableHostPorts.hostServices;
    const servers = [createServer(), createServer(), createServer()];
    try {
      const ports = [];
      for (const server of servers) ports.push(await listenForPods(server, "127.0.0.1"));
      assert.equal(new Set(ports).size, 3, `three different ports: ${ports.join(", ")}`);
      for (const port of ports) assert.ok(port >= first && port <= last, `${port} in ${first}-${last}`);
    } finally {
      for (const server of servers) server.close();
    }
  });
});
