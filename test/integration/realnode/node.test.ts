// test-needs: real-node
// A real node beside the control plane (`up --real-node`): real pods, their network, the
// secured kubelet, in-cluster API access, real volumes, real OOM kills, Pod Security.
// On the run's real-node cluster (scripts/test.ts starts one for every file that declares
// real-node; the machine hosts one at a time), reported as skipped, with the reason, where the
// machine cannot host a real node.
import assert from "node:assert/strict";
import { readFileSync, readlinkSync, statSync } from "node:fs";
import http from "node:http";
import https from "node:https";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { fakeNode } from "../../../src/cluster/bootstrap.ts";
import {
  type ClusterState,
  ensureBinaries,
  kwokTaint,
  listenForPods,
  loadImage,
  loadImageIfChanged,
  nodePaths,
  packImage,
  podReachableHostPorts,
  status,
  versions,
} from "../../../src/cluster/index.ts";
import { waitFor } from "../../harness/cluster.ts";
import { useRealNodeCluster } from "../../harness/realnode.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { busyboxPod, coreFor, isFinished, isReady, type Kubectl, kubectlFor, waitForPod } from "./harness.ts";

describe("a real node", () => {
  let dir: string;
  let state: ClusterState;
  let core: CoreV1Api;
  let kubectl: Kubectl;
  let busybox: string;
  let namespaceCount = 0;

  before(async () => {
    ({ dir, state } = await useRealNodeCluster());
    core = coreFor(state.kubeconfig);
    kubectl = await kubectlFor(state.kubeconfig);
    busybox = state.realNode!.images.busybox.name;
  });
  // The node is the run's: leave nothing running on it for the files that come after.
  after(async () => {
    for (let i = 1; i <= namespaceCount; i++)
      await core.deleteNamespace({ name: `rn-${process.pid}-${i}` }).catch(() => {});
  });

  /** A namespace of the test's own (Pod Security level optional). */
  async function namespace(level?: "restricted"): Promise<string> {
    const name = `rn-${process.pid}-${++namespaceCount}`;
    const labels = level ? { "pod-security.kubernetes.io/enforce": level } : undefined;
    await core.createNamespace({ body: { metadata: { name, labels } } });
    await waitFor(`default service account in ${name}`, async () =>
      core.readNamespacedServiceAccount({ name: "default", namespace: name }).then(
        () => true,
        () => false,
      ),
    );
    return name;
  }

  const createPod = (namespace: string, pod: V1Pod) => core.createNamespacedPod({ namespace, body: pod });
  const logs = (namespace: string, name: string) => kubectl("logs", "-n", namespace, name);

  it("joins as a Ready node of the control plane's version, at its bridge address, with status to show", async () => {
    const node = await core.readNode({ name: state.realNode!.nodeName });
    assert.equal(node.status?.nodeInfo?.kubeletVersion, versions.kubernetes);
    assert.match(node.status?.nodeInfo?.containerRuntimeVersion ?? "", /^containerd:\/\//);
    assert.deepEqual(
      node.status?.addresses?.filter((a) => a.type === "InternalIP").map((a) => a.address),
      [state.realNode!.nodeIp],
    );
    assert.equal(node.metadata?.labels?.["mlmodel.dev/real-node"], "true");
    assert.equal(node.metadata?.annotations?.["kwok.x-k8s.io/node"], undefined, "kwok leaves it alone");
    // A live-traffic file beside this one may hold kube-proxy stopped for a few seconds on purpose
    // (MLMODEL_TEST_PAUSE_KUBE_PROXY): every component must be healthy at one moment within a minute.
    const nodeComponents = ["containerd", "kubelet", "kube-proxy", "local-path-provisioner"];
    let components: string[] = [];
    const health = await waitFor(
      "the node's components all healthy",
      async () => {
        const now = await status(dir);
        components = now?.components.map((c) => `${c.component}:${c.healthy}`) ?? [];
        return nodeComponents.every((c) => components.includes(`${c}:true`)) ? now : undefined;
      },
      { timeoutMs: 60_000, describe: async () => components.join(" ") },
    );
    assert.equal(health?.node?.ready, "True");
    assert.equal(health?.node?.reason, "KubeletReady");
    // No kwok nodes beside a real node unless asked for: every pod lands on the real node.
    assert.deepEqual(
      (await core.listNode()).items.map((n) => n.metadata?.name),
      [state.realNode!.nodeName],
    );
  });

  it("keeps pods off tainted kwok nodes beside it, unless they tolerate the taint", async () => {
    const ns = await namespace();
    // A kwok node as `up --real-node --nodes 1` makes it: tainted, managed by kwok.
    const fake = fakeNode(7, kwokTaint);
    await core.createNode({ body: fake });
    try {
      await waitFor("kwok to make its node Ready", async () => {
        const node = await core.readNode({ name: fake.metadata!.name! });
        return node.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");
      });
      for (let i = 0; i < 4; i++) await createPod(ns, busyboxPod(`plain-${i}`, busybox, "sleep 3600"));
      const toleration = {
        key: kwokTaint.key,
        operator: "Equal",
        value: kwokTaint.value,
        effect: kwokTaint.effect,
      };
      await createPod(
        ns,
        busyboxPod("for-kwok", "an-image-that-exists-nowhere", "true", {
          spec: { tolerations: [toleration], nodeSelector: { type: "kwok" } },
        }),
      );
      for (let i = 0; i < 4; i++) {
        const pod = await waitForPod(core, ns, `plain-${i}`, "Running", (p) => p.status?.phase === "Running");
        assert.equal(pod.spec?.nodeName, state.realNode!.nodeName);
      }
      const onKwok = await waitForPod(
        core,
        ns,
        "for-kwok",
        "Running (kwok's)",
        (p) => p.status?.phase === "Running",
      );
      assert.equal(onKwok.spec?.nodeName, fake.metadata!.name);
    } finally {
      await core.deleteNamespace({ name: ns });
      await core.deleteNode({ name: fake.metadata!.name! });
    }
  });

  it("secures the kubelet API: no anonymous access, authorization by the API server", async () => {
    const node = await core.readNode({ name: state.realNode!.nodeName });
    const port = node.status?.daemonEndpoints?.kubeletEndpoint?.Port;
    assert.ok(port);
    const ca = readFileSync(join(dir, "pki", "ca.crt"), "utf8");
    const credentialsOf = (kubeconfig: string) => {
      const kc = new KubeConfig();
      kc.loadFromFile(kubeconfig);
      const user = kc.getCurrentUser()!;
      return {
        cert: Buffer.from(user.certData!, "base64").toString(),
        key: Buffer.from(user.keyData!, "base64").toString(),
      };
    };
    const get = (client?: { cert: string; key: string }) =>
      new Promise<number>((resolve, reject) => {
        https
          .get(`https://${state.realNode!.nodeIp}:${port}/pods`, { ca, ...client }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          })
          .on("error", reject);
      });
    assert.equal(await get(), 401, "anonymous");
    // kube-proxy's identity is valid but not allowed nodes/proxy: the webhook says no.
    assert.equal(await get(credentialsOf(join(dir, "kubeconfigs", "kube-proxy.kubeconfig"))), 403);
    assert.equal(
      await get({
        cert: readFileSync(join(dir, "pki", "apiserver-kubelet-client.crt"), "utf8"),
        key: readFileSync(join(dir, "pki", "apiserver-kubelet-client.key"), "utf8"),
      }),
      200,
      "the API server's kubelet client",
    );
  });

  it("admits only loopback and the bridge to the API server and the node's address", async () => {
    // An "outside" of our own: a network namespace joined to the host by a veth pair. It is
    // held by a process of ours, not named with `ip netns add`: that bind-mounts /run/netns
    // over itself, which hides the pods' netns mounts under it, and the node's teardown can
    // then neither unmount nor remove them (EBUSY; a CI run left 8 behind).
    const { execFileSync, spawn } = await import("node:child_process");
    const { createServer } = await import("node:net");
    const name = `mlguard${process.pid % 100000}`;
    const [hostEnd, nsEnd] = [`${name}h`, `${name}n`];
    const holder = spawn("unshare", ["--net", "sleep", "600"], { stdio: "ignore" });
    const inNs = (command: string, ...args: string[]) =>
      execFileSync("nsenter", [`--net=/proc/${holder.pid}/ns/net`, command, ...args], { encoding: "utf8" });
    const sh = (...args: string[]) => execFileSync("ip", args, { stdio: "pipe" });
    const control = createServer((socket) => socket.end("control\n"));
    try {
      // unshare execs sleep once the namespace is made: then the link can go into it.
      await waitFor(
        "the namespace holder",
        async () =>
          readlinkSync(`/proc/${holder.pid}/ns/net`) !== readlinkSync("/proc/self/ns/net") &&
          readFileSync(`/proc/${holder.pid}/comm`, "utf8").trim() === "sleep",
      );
      sh("link", "add", hostEnd, "type", "veth", "peer", "name", nsEnd, "netns", String(holder.pid));
      sh("addr", "add", "10.78.0.1/30", "dev", hostEnd);
      sh("link", "set", hostEnd, "up");
      inNs("ip", "addr", "add", "10.78.0.2/30", "dev", nsEnd);
      inNs("ip", "link", "set", nsEnd, "up");
      inNs("ip", "route", "add", "10.77.0.0/24", "via", "10.78.0.1");
      await new Promise<void>((resolve) => control.listen(0, "10.78.0.1", resolve));
      const connect = (host: string, port: number) =>
        inNs(
          process.execPath,
          "-e",
          `const s = require("node:net").connect(${port}, ${JSON.stringify(host)}, () => { console.log("connected"); process.exit(0); });
             s.on("error", (e) => { console.log(e.code); process.exit(0); });
             setTimeout(() => { console.log("timeout"); process.exit(0); }, 2000);`,
        ).trim();
      const apiserverPort = state.ports.apiserver;
      // The path works (an unguarded port answers) ...
      assert.equal(connect("10.78.0.1", (control.address() as { port: number }).port), "connected");
      // ... but the API server does not, at any address, nor anything at the node's address.
      assert.equal(connect("10.78.0.1", apiserverPort), "timeout");
      assert.equal(connect(state.realNode!.nodeIp, apiserverPort), "timeout");
    } finally {
      control.close();
      execFileSync("ip", ["link", "del", hostEnd], { stdio: "ignore" });
      holder.kill("SIGKILL");
    }
  });

  it("lets pods reach this machine only at the ports meant for them", async () => {
    const ns = await namespace();
    const nodeIp = state.realNode!.nodeIp;
    const answer = (_: http.IncomingMessage, res: http.ServerResponse) => res.end("reached\n");
    // A host service on every address, as many are, at a port not meant for pods ...
    const unmeant = http.createServer(answer);
    // ... and one meant for them, as the tests' model file servers are.
    const meant = http.createServer(answer);
    try {
      await new Promise<void>((resolve) => unmeant.listen(0, "0.0.0.0", resolve));
      const unmeantPort = (unmeant.address() as { port: number }).port;
      const meantPort = await listenForPods(meant, nodeIp);
      const { nodePorts, hostServices } = podReachableHostPorts;
      for (const range of [nodePorts, hostServices])
        assert.ok(
          unmeantPort < range.first || unmeantPort > range.last,
          `${unmeantPort} is outside the allowed ports`,
        );
      // Both answer at the node's address from this machine: the services are up.
      for (const port of [unmeantPort, meantPort])
        assert.equal(await (await fetch(`http://${nodeIp}:${port}/`)).text(), "reached\n");
      // busybox's nc (its static wget cannot resolve even an address): an HTTP request, and the answer's body.
      const probe = (port: number, label: string) =>
        `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 ${nodeIp} ${port} | grep -q '^reached$' && echo ${label}=reached || echo ${label}=unreached`;
      await createPod(
        ns,
        busyboxPod("prober", busybox, `${probe(meantPort, "meant")}; ${probe(unmeantPort, "unmeant")}`),
      );
      assert.equal((await waitForPod(core, ns, "prober", "finished", isFinished)).status?.phase, "Succeeded");
      const output = await logs(ns, "prober");
      assert.match(output, /^meant=reached$/m, output);
      assert.match(output, /^unmeant=unreached$/m, output);
    } finally {
      unmeant.close();
      meant.close();
    }
  });

  it("runs a pod whose IP and ClusterIP answer from the host and from another pod", async () => {
    const ns = await namespace();
    const script =
      "mkdir -p /www && echo hello-from-the-real-node > /www/index.html && exec httpd -f -p 8080 -h /www";
    const web = busyboxPod("web", busybox, script, {
      labels: { app: "web" },
      restartPolicy: "Always",
      container: { readinessProbe: { httpGet: { path: "/", port: 8080 }, periodSeconds: 1 } },
    });
    await createPod(ns, web);
    const service = await core.createNamespacedService({
      namespace: ns,
      body: {
        metadata: { name: "web" },
        spec: { selector: { app: "web" }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    const pod = await waitForPod(core, ns, "web", "Ready", isReady);
    assert.equal(pod.spec?.nodeName, state.realNode!.nodeName);
    const podIp = pod.status?.podIP ?? "";
    assert.ok(podIp.startsWith("10.77.0."), podIp);
    assert.equal(await (await fetch(`http://${podIp}:8080/`)).text(), "hello-from-the-real-node\n");
    const clusterIp = service.spec?.clusterIP ?? "";
    assert.ok(clusterIp);
    // kube-proxy programs the Service shortly after the endpoints appear.
    const viaService = await waitFor("the ClusterIP to answer from the host", async () => {
      const res = await fetch(`http://${clusterIp}/`, { signal: AbortSignal.timeout(2000) }).catch(
        () => undefined,
      );
      return res?.ok ? res.text() : undefined;
    });
    assert.equal(viaService, "hello-from-the-real-node\n");
    // From a second pod (kubectl exec through the secured kubelet): ClusterIP and pod IP.
    await createPod(ns, busyboxPod("client", busybox, "sleep 3600", { restartPolicy: "Always" }));
    await waitForPod(core, ns, "client", "Running", (p) => p.status?.phase === "Running");
    assert.equal(
      await kubectl("exec", "-n", ns, "client", "--", "wget", "-qO-", `http://${clusterIp}/`),
      "hello-from-the-real-node\n",
    );
    assert.equal(
      await kubectl("exec", "-n", ns, "client", "--", "wget", "-qO-", `http://${podIp}:8080/`),
      "hello-from-the-real-node\n",
    );
    // Pods have no route off this machine: the bridge's subnet and the Service range only.
    const routes = await kubectl("exec", "-n", ns, "client", "--", "ip", "route");
    assert.doesNotMatch(routes, /default/);
    assert.match(routes, /10\.96\.0\.0\/16 via 10\.77\.0\.1/);
    // No cluster DNS, and never the host's resolver: the pod's own loopback, where nothing answers.
    assert.equal(
      await kubectl("exec", "-n", ns, "client", "--", "cat", "/etc/resolv.conf"),
      "nameserver 127.0.0.1\n",
    );
  });

  it("serves kubectl logs, exec and port-forward through the kubelet", async () => {
    const ns = await namespace();
    await createPod(
      ns,
      busyboxPod(
        "talker",
        busybox,
        "echo first-line; mkdir /www; echo pf-ok > /www/index.html; exec httpd -f -p 9090 -h /www",
        {
          restartPolicy: "Always",
        },
      ),
    );
    await waitForPod(core, ns, "talker", "Running", (p) => p.status?.phase === "Running");
    await waitFor("the pod's log", async () => (await logs(ns, "talker")).includes("first-line"));
    assert.equal((await kubectl("exec", "-n", ns, "talker", "--", "sh", "-c", "echo $((6*7))")).trim(), "42");
    const { spawn } = await import("node:child_process");
    const { kubectl: binary } = await ensureBinaries();
    const forward = spawn(
      binary,
      ["--kubeconfig", kubectl.kubeconfig, "port-forward", "-n", ns, "pod/talker", ":9090"],
      {
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    try {
      const localPort = await new Promise<string>((resolve, reject) => {
        forward.stdout.setEncoding("utf8").on("data", (chunk: string) => {
          const m = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(chunk);
          if (m) resolve(m[1]!);
        });
        forward.once("exit", (code) => reject(new Error(`kubectl port-forward exited ${code}`)));
      });
      assert.equal(await (await fetch(`http://127.0.0.1:${localPort}/`)).text(), "pf-ok\n");
    } finally {
      forward.kill();
    }
  });

  it("lets a pod use the API server through the kubernetes Service with its own credentials", async () => {
    const ns = await namespace();
    // kubectl is a static binary: in a pod it finds the in-cluster configuration (the
    // Service's address in its environment, the service account's token and CA).
    const { kubectl: binary } = await ensureBinaries();
    const archive = join(scratchDir("kubectl-image"), "kubectl.tar");
    await packImage(
      {
        name: "mlmodel.local/kubectl-test:1",
        entries: [{ path: "kubectl", type: "file", mode: 0o755, content: readFileSync(binary) }],
        entrypoint: ["/kubectl"],
        user: "65534",
      },
      archive,
    );
    assert.deepEqual(await loadImage(dir, archive), ["mlmodel.local/kubectl-test:1"]);
    await createPod(
      ns,
      busyboxPod("whoami", "mlmodel.local/kubectl-test:1", [
        "/kubectl",
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
      ]),
    );
    const pod = await waitForPod(core, ns, "whoami", "finished", isFinished);
    assert.equal(pod.status?.phase, "Succeeded", await logs(ns, "whoami"));
    assert.equal(await logs(ns, "whoami"), `system:serviceaccount:${ns}:default`);
  });

  it("imports an image again when it was rebuilt under the same name, and only then", async () => {
    const scratch = scratchDir("rebuilt-image");
    const build = async (content: string) => {
      const archive = join(scratch, `${content}.tar`);
      const { name, digest } = await packImage(
        {
          name: "mlmodel.local/rebuilt-test:1",
          entries: [{ path: "build", type: "file", mode: 0o644, content: Buffer.from(content) }],
          entrypoint: ["/build"],
          user: "65534",
        },
        archive,
      );
      return { ref: name, archive, digest };
    };
    const first = await build("first");
    const second = await build("second");
    assert.notEqual(first.digest, second.digest);
    assert.equal(await loadImageIfChanged(dir, first), true, "not on the node yet");
    assert.equal(await loadImageIfChanged(dir, first), false, "the node holds this build");
    assert.equal(await loadImageIfChanged(dir, second), true, "rebuilt under the same name");
    assert.equal(await loadImageIfChanged(dir, second), false, "the node holds the new build");
    assert.equal(await loadImageIfChanged(dir, first), true, "the node no longer holds the first build");
  });

  it("provisions a claim on the default StorageClass; one non-root pod writes, another reads; delete reclaims", async () => {
    const ns = await namespace();
    await core.createNamespacedPersistentVolumeClaim({
      namespace: ns,
      body: {
        metadata: { name: "data" },
        spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "16Mi" } } },
      },
    });
    // Two users of one fsGroup, as the operator's restricted pods run: the volume is theirs through it.
    const fsGroup = 1000;
    const withClaim = (name: string, script: string, runAsUser: number) =>
      busyboxPod(name, busybox, script, {
        container: { volumeMounts: [{ name: "data", mountPath: "/data" }] },
        spec: {
          securityContext: { runAsNonRoot: true, runAsUser, runAsGroup: runAsUser, fsGroup },
          volumes: [{ name: "data", persistentVolumeClaim: { claimName: "data" } }],
        },
      });
    await createPod(ns, withClaim("writer", "echo written-by-writer > /data/file", 1000));
    assert.equal((await waitForPod(core, ns, "writer", "finished", isFinished)).status?.phase, "Succeeded");
    const claim = await core.readNamespacedPersistentVolumeClaim({ name: "data", namespace: ns });
    assert.equal(claim.status?.phase, "Bound");
    assert.equal(claim.spec?.storageClassName, state.realNode!.storageClass);
    const volumeName = claim.spec?.volumeName ?? "";
    assert.ok(volumeName);
    const volumeDir = join(nodePaths(dir).volumes, `${volumeName}_${ns}_data`);
    assert.equal(
      readFileSync(join(volumeDir, "file"), "utf8"),
      "written-by-writer\n",
      "a real directory on the node",
    );
    const { mode, uid, gid } = statSync(volumeDir);
    assert.equal(
      mode & 0o002,
      0,
      `the volume's directory is not world-writable (mode ${(mode & 0o7777).toString(8)})`,
    );
    assert.deepEqual([uid, gid], [0, fsGroup], "root's, group-owned by the pods' fsGroup");
    await createPod(ns, withClaim("reader", "cat /data/file", 2000));
    assert.equal((await waitForPod(core, ns, "reader", "finished", isFinished)).status?.phase, "Succeeded");
    assert.equal(await logs(ns, "reader"), "written-by-writer\n");

    for (const name of ["writer", "reader"]) await core.deleteNamespacedPod({ name, namespace: ns });
    await core.deleteNamespacedPersistentVolumeClaim({ name: "data", namespace: ns });
    await waitFor("the volume to be deleted and its directory removed", async () => {
      const gone = await core.readPersistentVolume({ name: volumeName }).then(
        () => false,
        () => true,
      );
      const { existsSync } = await import("node:fs");
      return gone && !existsSync(volumeDir);
    });
  });

  it("OOM-kills a container that outgrows its memory limit", async () => {
    const ns = await namespace();
    // tail keeps a line in memory until its newline, and /dev/zero has none.
    await createPod(
      ns,
      busyboxPod("hog", busybox, ["tail", "/dev/zero"], {
        container: { resources: { limits: { memory: "32Mi" } } },
      }),
    );
    const pod = await waitForPod(core, ns, "hog", "terminated", (p) =>
      Boolean(p.status?.containerStatuses?.[0]?.state?.terminated),
    );
    const terminated = pod.status?.containerStatuses?.[0]?.state?.terminated;
    assert.equal(terminated?.reason, "OOMKilled");
    assert.equal(terminated?.exitCode, 137);
  });

  it("honours the restricted Pod Security level: a compliant pod runs confined, a loose one is refused", async () => {
    const ns = await namespace("restricted");
    const script =
      "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; touch /x 2>/dev/null || echo read-only-root";
    await createPod(
      ns,
      busyboxPod("confined", busybox, script, {
        container: {
          securityContext: {
            allowPrivilegeEscalation: false,
            capabilities: { drop: ["ALL"] },
            readOnlyRootFilesystem: true,
          },
        },
        spec: {
          securityContext: {
            runAsNonRoot: true,
            runAsUser: 65534,
            runAsGroup: 65534,
            seccompProfile: { type: "RuntimeDefault" },
          },
        },
      }),
    );
    const pod = await waitForPod(core, ns, "confined", "finished", isFinished);
    assert.equal(pod.status?.phase, "Succeeded");
    const output = await logs(ns, "confined");
    assert.match(output, /^65534$/m);
    assert.match(output, /^CapEff:\s+0{16}$/m, "no capabilities");
    assert.match(output, /^NoNewPrivs:\s+1$/m);
    assert.match(output, /^Seccomp:\s+2$/m, "seccomp filter mode");
    assert.match(output, /read-only-root/);
    await assert.rejects(
      createPod(ns, busyboxPod("loose", busybox, "true")),
      (err: { code?: number; body?: string }) => {
        assert.equal(err.code, 403);
        assert.match(String(err.body), /violates PodSecurity/);
        return true;
      },
    );
  });
});
