// test-needs: own-real-node
// Several real nodes on one machine (`up --real-nodes 3`): each in a network namespace of its
// own, zone-labelled; pods spread over them and reach each other across nodes by pod IP and
// ClusterIP; NodePort on every node; node-local and shared storage; node faults (drain through a
// PodDisruptionBudget, stop, partition and heal); and `down` leaves the machine as it found it.
//
// One cluster for the whole file (it holds the machine's real-node lock from before `up` to
// after `down`): each test builds on a Ready fleet and leaves it Ready.
import assert from "node:assert/strict";
import { readlinkSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { AppsV1Api, type CoreV1Api, KubeConfig, PolicyV1Api, type V1Pod } from "@kubernetes/client-node";
import {
  type ClusterState,
  down,
  loadImage,
  memberOf,
  multiNodeDefaults,
  nodeFault,
  packImage,
  readFleetJournal,
  releaseRealNode,
  reserveRealNode,
  status,
  up,
} from "../../../src/cluster/index.ts";
import { memberPathsAt } from "../../../src/cluster/node/config.ts";
import { importedImagesIn } from "../../../src/cluster/node/node.ts";
import { waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import {
  busyboxPod,
  coreFor,
  isFinished,
  isReady,
  type Kubectl,
  kubectlFor,
  nodeLockWaitMs,
  waitForPod,
} from "../../integration/realnode/harness.ts";
import {
  assertMachineAsBefore,
  type MachineState,
  snapshotMachine,
} from "../../integration/realnode/machine.ts";

const log = (line: string) => console.log(`# [cluster] ${line}`);
const nodeCount = 3;
const names = Array.from({ length: nodeCount }, (_, i) => memberOf(i + 1).name);

describe("several real nodes on one machine", { timeout: Number.POSITIVE_INFINITY }, () => {
  const dir = scratchDir("multinode");
  let machineBefore: MachineState;
  let state: ClusterState;
  let core: CoreV1Api;
  let apps: AppsV1Api;
  let kubectl: Kubectl;
  let busybox: string;
  let tornDown = false;
  const ns = "multi";

  before(
    async () => {
      await reserveRealNode(dir, { waitMs: nodeLockWaitMs, progress: log });
      machineBefore = snapshotMachine(dir);
      state = await up({
        dir,
        realNodes: nodeCount,
        stopWhenGone: process.pid,
        nodeLockWaitMs,
        progress: log,
      });
      core = coreFor(state.kubeconfig);
      const kc = new KubeConfig();
      kc.loadFromFile(state.kubeconfig);
      apps = kc.makeApiClient(AppsV1Api);
      kubectl = await kubectlFor(state.kubeconfig);
      busybox = state.realNodes!.images.busybox.name;
      await core.createNamespace({ body: { metadata: { name: ns } } });
      await waitFor(`default service account in ${ns}`, () =>
        core.readNamespacedServiceAccount({ name: "default", namespace: ns }).then(
          () => true,
          () => false,
        ),
      );
    },
    { timeout: nodeLockWaitMs + 15 * 60_000 },
  );
  after(async () => {
    if (!tornDown) await down(dir).catch(() => {});
    await releaseRealNode(dir);
  });

  const podsOf = async (app: string) =>
    (await core.listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` })).items.filter(
      (p) => !p.metadata?.deletionTimestamp,
    );
  const readyPods = async (app: string) => (await podsOf(app)).filter(isReady);
  const exec = (pod: string, ...command: string[]) => kubectl("exec", "-n", ns, pod, "--", ...command);
  const nodeReady = async (name: string) =>
    (await core.readNode({ name })).status?.conditions?.find((c) => c.type === "Ready")?.status;

  /** A Deployment of busybox web servers that answer with their pod's name. */
  async function deployWeb(
    app: string,
    replicas: number,
    spec: Partial<NonNullable<V1Pod["spec"]>> = {},
    readinessDelay = 0,
  ): Promise<void> {
    const pod = busyboxPod(
      app,
      busybox,
      'mkdir -p /www && echo "$POD_NAME" > /www/index.html && exec httpd -f -p 8080 -h /www',
      {
        labels: { app },
        restartPolicy: "Always",
        container: {
          env: [{ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }],
          readinessProbe: {
            httpGet: { path: "/", port: 8080 },
            periodSeconds: 1,
            initialDelaySeconds: readinessDelay,
          },
        },
        spec,
      },
    );
    await apps.createNamespacedDeployment({
      namespace: ns,
      body: {
        metadata: { name: app },
        spec: {
          replicas,
          selector: { matchLabels: { app } },
          template: { metadata: { labels: { app } }, spec: pod.spec! },
        },
      },
    });
  }

  const waitReadyCount = (app: string, count: number, what = `${count} ready pods of ${app}`) =>
    waitFor(what, async () => ((await readyPods(app)).length === count ? true : undefined), {
      timeoutMs: 240_000,
      intervalMs: 500,
    });

  it("joins three Ready nodes, each in a network namespace of its own, spread over zones", async () => {
    const nodes = (await core.listNode()).items;
    assert.deepEqual(nodes.map((n) => n.metadata?.name).sort(), names);
    for (const node of nodes) {
      const name = node.metadata!.name!;
      const member = memberOf(Number(name.split("-").at(-1)));
      assert.equal(node.status?.conditions?.find((c) => c.type === "Ready")?.status, "True", name);
      assert.equal(node.metadata?.labels?.["kubernetes.io/hostname"], name);
      assert.equal(node.metadata?.labels?.["topology.kubernetes.io/zone"], member.zone);
      assert.equal(node.spec?.podCIDR, member.podCidr);
      assert.deepEqual(
        node.status?.addresses?.filter((a) => a.type === "InternalIP").map((a) => a.address),
        [member.nodeIp],
      );
    }
    const zones = new Set(nodes.map((n) => n.metadata?.labels?.["topology.kubernetes.io/zone"]));
    assert.equal(zones.size, nodeCount, "one zone per node");
    // Every node's containerd, kubelet and kube-proxy run in the node's namespace, none in the host's.
    const journal = await readFleetJournal(dir);
    const hostNetns = readlinkSync("/proc/self/ns/net");
    const netnsOf = journal!.members.map((member) => {
      const namespaces = new Set(member.processes.map((p) => readlinkSync(`/proc/${p.pid}/ns/net`)));
      assert.equal(namespaces.size, 1, `${member.name}'s processes share one namespace`);
      assert.equal(member.processes.length, 3, `${member.name} runs containerd, kubelet and kube-proxy`);
      return [...namespaces][0];
    });
    assert.equal(new Set(netnsOf).size, nodeCount, "each node has a namespace of its own");
    assert.ok(!netnsOf.includes(hostNetns), "no node runs in the host's namespace");
    const health = await status(dir);
    assert.deepEqual(
      health?.nodes?.map((n) => [n.nodeName, n.ready, n.members.components.every((c) => c.healthy)]),
      names.map((name) => [name, "True", true]),
    );
  });

  it("imports an image on every node (load-image)", async () => {
    const archive = `${scratchDir("multinode-image")}/tiny.tar`;
    const { digest } = await packImage(
      {
        name: "mlmodel.local/multinode-test:1",
        entries: [{ path: "hello", type: "file", mode: 0o644, content: Buffer.from("hi\n") }],
      },
      archive,
    );
    assert.deepEqual(await loadImage(dir, archive), ["mlmodel.local/multinode-test:1"]);
    const journal = await readFleetJournal(dir);
    for (const member of journal!.members) {
      const images = await importedImagesIn(memberPathsAt(member.root).containerdSocket, member.name);
      assert.equal(images.get("mlmodel.local/multinode-test:1"), digest, `${member.name} holds the image`);
    }
  });

  it("spreads a Deployment one pod per node; every pod answers every other by pod IP and by ClusterIP; NodePort on every node", async () => {
    await deployWeb("web", nodeCount, {
      topologySpreadConstraints: [
        {
          maxSkew: 1,
          topologyKey: "kubernetes.io/hostname",
          whenUnsatisfiable: "DoNotSchedule",
          labelSelector: { matchLabels: { app: "web" } },
        },
      ],
    });
    await waitReadyCount("web", nodeCount);
    const pods = await readyPods("web");
    assert.deepEqual(pods.map((p) => p.spec?.nodeName).sort(), names, "one pod on each node");
    // A Service per pod (selected by a label of its own), so that each ClusterIP names one pod.
    const clusterIps = new Map<string, string>();
    for (const pod of pods) {
      const name = pod.metadata!.name!;
      await core.patchNamespacedPod({
        name,
        namespace: ns,
        body: [{ op: "add", path: "/metadata/labels/pod", value: name }],
      });
      const svc = await core.createNamespacedService({
        namespace: ns,
        body: {
          metadata: { name: `to-${pod.spec!.nodeName}` },
          spec: { selector: { pod: name }, ports: [{ port: 80, targetPort: 8080 }] },
        },
      });
      clusterIps.set(name, svc.spec!.clusterIP!);
    }
    const fetchFrom = async (from: string, address: string) =>
      waitFor(
        `${from} to fetch http://${address}/`,
        // busybox's wget -T crashes (Debian's 1.35): its own timeout applet bounds it instead.
        async () =>
          (await exec(from, "timeout", "5", "wget", "-qO-", `http://${address}/`).catch(() => "")).trim() ||
          undefined,
      );
    let answers = 0;
    for (const from of pods) {
      for (const to of pods) {
        const [fromName, toName] = [from.metadata!.name!, to.metadata!.name!];
        assert.equal(
          await fetchFrom(fromName, `${to.status!.podIP}:8080`),
          toName,
          `${fromName} -> pod IP of ${toName}`,
        );
        assert.equal(
          await fetchFrom(fromName, clusterIps.get(toName)!),
          toName,
          `${fromName} -> ClusterIP of ${toName}`,
        );
        answers += 2;
      }
    }
    assert.equal(answers, 2 * nodeCount * nodeCount);
    // NodePort: every node's address answers from the host, whichever node the pod is on.
    const nodePort = await core.createNamespacedService({
      namespace: ns,
      body: {
        metadata: { name: "web-nodeport" },
        spec: { type: "NodePort", selector: { app: "web" }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    const port = nodePort.spec!.ports![0]!.nodePort!;
    const podNames = new Set(pods.map((p) => p.metadata!.name!));
    for (const node of names) {
      const body = await waitFor(`NodePort ${port} on ${node}`, async () => {
        const res = await fetch(`http://${memberOf(Number(node.split("-").at(-1))).nodeIp}:${port}/`, {
          signal: AbortSignal.timeout(3000),
        }).catch(() => undefined);
        return res?.ok ? (await res.text()).trim() : undefined;
      });
      assert.ok(podNames.has(body), `${node}'s NodePort answered ${body}`);
    }
  });

  it("pins a ReadWriteOnce volume's pods to its node; shares a ReadWriteMany volume across all nodes", async () => {
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: "local" },
        spec: {
          storageClassName: multiNodeDefaults.localStorageClass,
          accessModes: ["ReadWriteOnce"],
          resources: { requests: { storage: "1Mi" } },
        },
      },
    });
    const withClaim = (claim: string, spec: Partial<NonNullable<V1Pod["spec"]>> = {}) => ({
      volumes: [{ name: "data", persistentVolumeClaim: { claimName: claim } }],
      ...spec,
    });
    const mount = { volumeMounts: [{ name: "data", mountPath: "/data" }] };
    await core.createNamespacedPod({
      namespace: ns,
      body: busyboxPod("rwo-writer", busybox, "echo here > /data/file", {
        container: mount,
        spec: withClaim("local"),
      }),
    });
    const writer = await waitForPod(core, ns, "rwo-writer", "to finish", isFinished);
    assert.equal(writer.status?.phase, "Succeeded");
    const home = writer.spec!.nodeName!;
    const claim = await core.readNamespacedPersistentVolumeClaim({ name: "local", namespace: ns });
    const pv = await core.readPersistentVolume({ name: claim.spec!.volumeName! });
    assert.deepEqual(
      pv.spec?.nodeAffinity?.required?.nodeSelectorTerms?.[0]?.matchExpressions?.[0]?.values,
      [home],
      "the volume lives on the writer's node",
    );
    // A pod that must run elsewhere cannot have it: Pending, with the scheduler's reason.
    await core.createNamespacedPod({
      namespace: ns,
      body: busyboxPod("rwo-elsewhere", busybox, "cat /data/file", {
        container: mount,
        spec: withClaim("local", {
          affinity: {
            nodeAffinity: {
              requiredDuringSchedulingIgnoredDuringExecution: {
                nodeSelectorTerms: [
                  {
                    matchExpressions: [{ key: "kubernetes.io/hostname", operator: "NotIn", values: [home] }],
                  },
                ],
              },
            },
          },
        }),
      }),
    });
    const pending = await waitForPod(core, ns, "rwo-elsewhere", "to be unschedulable", (p) =>
      Boolean(p.status?.conditions?.some((c) => c.type === "PodScheduled" && c.reason === "Unschedulable")),
    );
    assert.equal(pending.status?.phase, "Pending");
    assert.match(
      pending.status?.conditions?.find((c) => c.type === "PodScheduled")?.message ?? "",
      /didn't match PersistentVolume's node affinity|volume node affinity conflict/,
    );
    // And a pod that may run anywhere is put on the volume's node, and reads what was written.
    await core.createNamespacedPod({
      namespace: ns,
      body: busyboxPod("rwo-reader", busybox, "cat /data/file", {
        container: mount,
        spec: withClaim("local"),
      }),
    });
    const reader = await waitForPod(core, ns, "rwo-reader", "to finish", isFinished);
    assert.equal(reader.spec?.nodeName, home);
    assert.equal((await kubectl("logs", "-n", ns, "rwo-reader")).trim(), "here");

    // ReadWriteMany: one pod on each node, each writes a file named after its node and reads all.
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: "shared" },
        spec: {
          storageClassName: multiNodeDefaults.sharedStorageClass,
          accessModes: ["ReadWriteMany"],
          resources: { requests: { storage: "1Mi" } },
        },
      },
    });
    const script = `echo from-$NODE > /data/$NODE; until [ "$(ls /data | wc -l)" -ge ${nodeCount} ]; do sleep 0.2; done; cat /data/*`;
    for (const node of names)
      await core.createNamespacedPod({
        namespace: ns,
        body: busyboxPod(`rwx-${node}`, busybox, script, {
          container: { ...mount, env: [{ name: "NODE", value: node }] },
          spec: withClaim("shared", { nodeSelector: { "kubernetes.io/hostname": node } }),
        }),
      });
    for (const node of names) {
      const pod = await waitForPod(core, ns, `rwx-${node}`, "to finish", isFinished);
      assert.equal(pod.status?.phase, "Succeeded", node);
      assert.equal(pod.spec?.nodeName, node);
      const seen = (await kubectl("logs", "-n", ns, `rwx-${node}`)).trim().split("\n").sort();
      assert.deepEqual(
        seen,
        names.map((n) => `from-${n}`),
        `${node} reads what every node wrote`,
      );
    }
  });

  it("drains a node through a PodDisruptionBudget: never fewer ready pods than minAvailable", async () => {
    const target = names[0]!;
    // All three replicas on the target: the others are cordoned while they are placed.
    for (const node of names.slice(1)) await nodeFault(dir, "cordon", node);
    await deployWeb("budgeted", 3, {}, 2);
    await waitReadyCount("budgeted", 3);
    assert.deepEqual(
      (await readyPods("budgeted")).map((p) => p.spec?.nodeName),
      [target, target, target],
    );
    for (const node of names.slice(1)) await nodeFault(dir, "uncordon", node);
    const kc = new KubeConfig();
    kc.loadFromFile(state.kubeconfig);
    await kc.makeApiClient(PolicyV1Api).createNamespacedPodDisruptionBudget({
      namespace: ns,
      body: {
        metadata: { name: "budgeted" },
        spec: { minAvailable: 2, selector: { matchLabels: { app: "budgeted" } } },
      },
    });
    await waitFor("the budget to allow one disruption", async () => {
      const pdb = await kc
        .makeApiClient(PolicyV1Api)
        .readNamespacedPodDisruptionBudget({ name: "budgeted", namespace: ns });
      return pdb.status?.disruptionsAllowed === 1;
    });
    let fewest = 3;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        fewest = Math.min(fewest, (await readyPods("budgeted")).length);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const refusals: string[] = [];
    await nodeFault(dir, "drain", target, { progress: (line) => refusals.push(line) });
    watching = false;
    await watcher;
    const node = await core.readNode({ name: target });
    assert.equal(node.spec?.unschedulable, true, "a drained node is cordoned");
    assert.ok(refusals.length > 0, "the budget refused at least one eviction while replacements started");
    assert.ok(fewest >= 2, `ready pods went down to ${fewest}, below minAvailable 2`);
    await waitReadyCount("budgeted", 3);
    const placed = (await readyPods("budgeted")).map((p) => p.spec?.nodeName);
    assert.ok(!placed.includes(target), `no pod left on the drained node (${placed.join(", ")})`);
    await nodeFault(dir, "uncordon", target);
  });

  /**
   * Pods that leave an unreachable node after 2 s (the default is 300 s), one per node (the
   * fourth on any), so that each node the tests take down has one to lose.
   */
  const impatient = {
    tolerations: ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"].map((key) => ({
      key,
      operator: "Exists",
      effect: "NoExecute",
      tolerationSeconds: 2,
    })),
    topologySpreadConstraints: [
      {
        maxSkew: 1,
        topologyKey: "kubernetes.io/hostname",
        whenUnsatisfiable: "DoNotSchedule" as const,
        // A node that is down (tainted) does not count: the pods spread over the others.
        nodeTaintsPolicy: "Honor",
        labelSelector: { matchLabels: { app: "resilient" } },
      },
    ],
  };

  it("node stop: the node goes NotReady, its pods are replaced on the others; node start brings it back", async () => {
    await deployWeb("resilient", 3, impatient);
    await waitReadyCount("resilient", 3);
    const victim = names[2]!;
    const onVictim = async () => (await readyPods("resilient")).filter((p) => p.spec?.nodeName === victim);
    if ((await onVictim()).length === 0) assert.fail(`no pod of resilient on ${victim} to lose`);
    await nodeFault(dir, "stop", victim);
    await waitFor(`${victim} NotReady`, async () => (await nodeReady(victim)) !== "True", {
      timeoutMs: 180_000,
      intervalMs: 1000,
    });
    await waitFor(
      "3 ready pods of resilient, none on the stopped node",
      async () => {
        const ready = await readyPods("resilient");
        return ready.length === 3 && ready.every((p) => p.spec?.nodeName !== victim) ? true : undefined;
      },
      { timeoutMs: 240_000, intervalMs: 1000 },
    );
    await nodeFault(dir, "start", victim);
    assert.equal(await nodeReady(victim), "True");
  });

  it("node partition: NotReady with its processes still running, pods replaced; node heal: Ready again", async () => {
    const victim = names[1]!;
    await apps.patchNamespacedDeploymentScale({
      name: "resilient",
      namespace: ns,
      body: [{ op: "replace", path: "/spec/replicas", value: 4 }],
    });
    await waitFor(
      `a pod of resilient on ${victim}`,
      async () =>
        (await readyPods("resilient")).some((p) => p.spec?.nodeName === victim) ? true : undefined,
      { timeoutMs: 240_000, intervalMs: 500 },
    );
    await nodeFault(dir, "partition", victim);
    await waitFor(`${victim} NotReady`, async () => (await nodeReady(victim)) !== "True", {
      timeoutMs: 180_000,
      intervalMs: 1000,
    });
    await waitFor(
      "4 ready pods of resilient, none on the partitioned node",
      async () => {
        const ready = await readyPods("resilient");
        return ready.length === 4 && ready.every((p) => p.spec?.nodeName !== victim) ? true : undefined;
      },
      { timeoutMs: 240_000, intervalMs: 1000 },
    );
    const partitioned = (await status(dir))?.nodes?.find((n) => n.nodeName === victim);
    assert.equal(partitioned?.members.linked, false);
    assert.deepEqual(
      partitioned?.members.components.map((c) => [c.component, c.running]),
      [
        ["containerd", true],
        ["kubelet", true],
        ["kube-proxy", true],
      ],
      "the partitioned node's processes keep running",
    );
    await nodeFault(dir, "heal", victim);
    assert.equal(await nodeReady(victim), "True");
  });

  it("down leaves the machine as it found it", async () => {
    const during = snapshotMachine(dir);
    for (const part of ["processes", "mounts", "links", "routes", "iptables", "cgroups"] as const)
      assert.notDeepEqual(during[part], machineBefore[part], `the snapshot's ${part} show the running nodes`);
    const result = await down(dir);
    tornDown = true;
    assert.deepEqual(result?.leftovers, []);
    await assertMachineAsBefore(dir, machineBefore);
  });
});
