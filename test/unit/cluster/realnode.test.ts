// The real node's pure parts: configuration it renders, iptables plans, the image packer,
// the machine lock and its certificates. The node itself is tested in test/integration/realnode.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { gunzipSync } from "node:zlib";
import { parse } from "yaml";
import { fakeNode } from "../../../src/cluster/bootstrap.ts";
import { kwokTaint, nodePaths, podReachableHostPorts } from "../../../src/cluster/node/config.ts";
import { parseMountInfo } from "../../../src/cluster/node/host.ts";
import {
  acquireMachineLock,
  MachineLockError,
  readLock,
  releaseMachineLock,
  takerAlive,
} from "../../../src/cluster/node/lock.ts";
import {
  bridgeInputRules,
  guardRules,
  isEmptyNftTable,
  parseNftTables,
  removalPlan,
} from "../../../src/cluster/node/network.ts";
import { normaliseEntries, packImage, tarArchive } from "../../../src/cluster/node/oci.ts";
import {
  aptInstall,
  missingRequirements,
  PrerequisiteError,
  realNodeSupport,
} from "../../../src/cluster/node/prerequisites.ts";
import {
  cniConfig,
  containerdConfig,
  containerdEnvironment,
  kubeletConfig,
  kubeProxyConfig,
  type NodeLayout,
} from "../../../src/cluster/node/render.ts";
import { generatePki } from "../../../src/cluster/pki.ts";
import { scratchDir } from "../../harness/scratch.ts";

const layout: NodeLayout = {
  paths: nodePaths("/state/c1"),
  ports: {
    kubelet: 20250,
    kubeletHealthz: 20248,
    kubeProxyHealthz: 20256,
    kubeProxyMetrics: 20249,
    containerdMetrics: 20338,
  },
  nodeName: "mlmodel-node",
  nodeIp: "10.77.0.1",
  podCidr: "10.77.0.0/24",
  bridge: "mlmodel0",
  pauseImage: "mlmodel.local/pause:abc",
  helperImage: "mlmodel.local/busybox:1.35.0",
  caFile: "/state/c1/pki/ca.crt",
  kubeletCertFile: "/state/c1/pki/kubelet.crt",
  kubeletKeyFile: "/state/c1/pki/kubelet.key",
  kubeletKubeconfig: "/state/c1/kubeconfigs/kubelet.kubeconfig",
  kubeProxyKubeconfig: "/state/c1/kubeconfigs/kube-proxy.kubeconfig",
};

describe("real node configuration", () => {
  it("runs containerd of its own, with the CRI settings this machine kind needs", () => {
    const toml = containerdConfig(layout);
    assert.match(toml, /^root = "\/state\/c1\/node\/containerd\/root"$/m);
    assert.match(toml, /^state = "\/state\/c1\/node\/containerd\/state"$/m);
    assert.match(toml, /address = "\/state\/c1\/node\/containerd\/containerd.sock"/);
    assert.match(toml, /restrict_oom_score_adj = true/);
    assert.match(toml, /SystemdCgroup = false/);
    assert.match(toml, /sandbox_image = "mlmodel.local\/pause:abc"/);
    assert.match(toml, /bin_dir = "\/usr\/lib\/cni"/);
    assert.match(toml, /conf_dir = "\/state\/c1\/node\/cni\/net.d"/);
    assert.match(toml, /stream_server_address = "127.0.0.1"/);
    // Nothing of it under the system containerd's paths.
    assert.doesNotMatch(toml, /\/var\/lib\/containerd|"\/run\/containerd\/containerd.sock"/);
  });

  it("sends every image pull of its containerd to a refusing loopback proxy, whatever proxy the user set", () => {
    const env = containerdEnvironment({
      PATH: "/usr/bin",
      HTTPS_PROXY: "http://corp-proxy:3128",
      no_proxy: "*",
      NO_PROXY: "registry.example.com",
      all_proxy: "socks5://x",
    });
    assert.equal(env.PATH, "/usr/bin");
    for (const name of ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"])
      assert.equal(env[name], "http://127.0.0.1:1", name);
    // An exception list would let a pull through to the network: none is left.
    for (const name of ["NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"])
      assert.equal(env[name], undefined, name);
  });

  it("gives pods no route off the machine: Service range only, no masquerade", () => {
    const conf = JSON.parse(cniConfig(layout));
    const bridge = conf.plugins[0];
    assert.equal(bridge.bridge, "mlmodel0");
    assert.equal(bridge.ipMasq, false);
    assert.deepEqual(bridge.ipam.routes, [{ dst: "10.96.0.0/16" }]);
    assert.equal(bridge.ipam.ranges[0][0].gateway, "10.77.0.1");
    assert.equal(bridge.ipam.dataDir, "/state/c1/node/cni/ipam");
  });

  it("secures kubelet (webhook authn/authz, no anonymous, no read-only port) and keeps it to its dirs", () => {
    const config = parse(kubeletConfig(layout));
    assert.equal(config.authentication.anonymous.enabled, false);
    assert.equal(config.authentication.webhook.enabled, true);
    assert.equal(config.authentication.x509.clientCAFile, "/state/c1/pki/ca.crt");
    assert.equal(config.authorization.mode, "Webhook");
    assert.equal(config.readOnlyPort, 0);
    assert.equal(config.address, "10.77.0.1");
    assert.equal(config.healthzBindAddress, "127.0.0.1");
    assert.equal(config.tlsCertFile, "/state/c1/pki/kubelet.crt");
    assert.equal(config.failCgroupV1, false);
    assert.equal(config.cgroupDriver, "cgroupfs");
    assert.equal(config.failSwapOn, false);
    assert.deepEqual(config.enforceNodeAllocatable, []);
    assert.deepEqual(config.evictionHard, {});
    assert.equal(config.localStorageCapacityIsolation, false);
    assert.equal(config.resolvConf, "/state/c1/node/resolv.conf");
    assert.equal(config.podLogsDir, "/state/c1/node/pod-logs");
    assert.equal(config.containerRuntimeEndpoint, "unix:///state/c1/node/containerd/containerd.sock");
  });

  it("keeps kube-proxy from changing sysctls and NodePorts off the bridge", () => {
    const config = parse(kubeProxyConfig(layout));
    assert.equal(config.mode, "iptables");
    assert.deepEqual(config.nodePortAddresses, ["10.77.0.1/32"]);
    assert.equal(config.iptables.localhostNodePorts, false);
    assert.equal(config.conntrack.maxPerCore, 0);
    assert.equal(config.healthzBindAddress, "127.0.0.1:20256");
  });

  it("taints kwok nodes beside a real node, and only then", () => {
    assert.deepEqual(fakeNode(0, kwokTaint).spec?.taints, [kwokTaint]);
    assert.equal(fakeNode(0).spec?.taints, undefined);
  });
});

describe("iptables plans", () => {
  it("guards: forwarding off the bridge, untranslated Service traffic, API server from outside", () => {
    const options = {
      bridge: "mlmodel0",
      podCidr: "10.77.0.0/24",
      apiserverPort: 6443,
      kubeletPorts: [10250],
    };
    const v4 = guardRules(4, options);
    assert.match(v4, /-A MLMODEL-FORWARD -i mlmodel0 ! -o mlmodel0 -j DROP/);
    assert.match(v4, /-A MLMODEL-FORWARD ! -i mlmodel0 -o mlmodel0 -j DROP/);
    assert.match(v4, /-A MLMODEL-POSTROUTING -d 10\.96\.0\.0\/16 -j DROP/);
    assert.match(v4, /-A MLMODEL-POSTROUTING -d 10\.244\.0\.0\/16 -j DROP/);
    assert.match(v4, /-A MLMODEL-INPUT -i lo -j RETURN\n-A MLMODEL-INPUT -i mlmodel0 -m conntrack/);
    assert.doesNotMatch(v4, /-i mlmodel0 -j RETURN/, "no longer every port of the host");
    assert.match(v4, /--dport 6443 -j DROP/);
    const v6 = guardRules(6, options);
    assert.doesNotMatch(v6, /mangle|10\.77/);
    assert.match(v6, /--dport 6443 -j DROP/);
  });

  it("lets pods reach the API server, the kubelet, NodePorts and the named host ports, and drops the rest", () => {
    const rules = bridgeInputRules("MLMODEL-INPUT", {
      bridge: "mlmodel0",
      podCidr: "10.77.0.0/24",
      apiserverPort: 6443,
      kubeletPorts: [10250],
    });
    const { nodePorts, hostServices } = podReachableHostPorts;
    assert.deepEqual(rules, [
      "-A MLMODEL-INPUT -i mlmodel0 -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
      "-A MLMODEL-INPUT -i mlmodel0 -p tcp -m tcp --dport 6443 -j RETURN",
      "-A MLMODEL-INPUT -i mlmodel0 -p tcp -m tcp --dport 10250 -j RETURN",
      `-A MLMODEL-INPUT -i mlmodel0 -p tcp -m tcp --dport ${nodePorts.first}:${nodePorts.last} -j RETURN`,
      `-A MLMODEL-INPUT -i mlmodel0 -p udp -m udp --dport ${nodePorts.first}:${nodePorts.last} -j RETURN`,
      `-A MLMODEL-INPUT -i mlmodel0 -p tcp -m tcp --dport ${hostServices.first}:${hostServices.last} -j RETURN`,
      `-A MLMODEL-INPUT -i mlmodel0 -p udp -m udp --dport ${hostServices.first}:${hostServices.last} -j RETURN`,
      "-A MLMODEL-INPUT -i mlmodel0 -j DROP",
    ]);
    // The named range lies outside the NodePorts and below the kernel's usual ephemeral ports.
    assert.ok(hostServices.last < nodePorts.first);
    assert.ok(hostServices.last < 32768);
  });

  const saved = `# Generated by iptables-nft-save v1.8.9
*mangle
:PREROUTING ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:KUBE-KUBELET-CANARY - [0:0]
:MLMODEL-FORWARD - [0:0]
-A FORWARD -j MLMODEL-FORWARD
-A MLMODEL-FORWARD -i mlmodel0 ! -o mlmodel0 -j DROP
COMMIT
*filter
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER-USER - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m comment --comment "kubernetes service portals" -m conntrack --ctstate NEW -j KUBE-SERVICES
-A INPUT -j KUBE-FIREWALL
-A INPUT -p tcp --dport 22 -j ACCEPT
-A DOCKER-USER -j RETURN
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP
COMMIT
*raw
:PREROUTING ACCEPT [0:0]
-A PREROUTING -j ACCEPT
COMMIT
`;

  it("removes our chains, kubelet's and kube-proxy's and the jumps to them, nothing else", () => {
    const plan = removalPlan(saved);
    assert.equal(
      plan,
      [
        "*mangle",
        "-D FORWARD -j MLMODEL-FORWARD",
        "-F KUBE-KUBELET-CANARY",
        "-F MLMODEL-FORWARD",
        "-X KUBE-KUBELET-CANARY",
        "-X MLMODEL-FORWARD",
        "COMMIT",
        "*filter",
        '-D INPUT -m comment --comment "kubernetes service portals" -m conntrack --ctstate NEW -j KUBE-SERVICES',
        "-D INPUT -j KUBE-FIREWALL",
        "-F KUBE-FIREWALL",
        "-F KUBE-SERVICES",
        "-X KUBE-FIREWALL",
        "-X KUBE-SERVICES",
        "COMMIT",
        "",
      ].join("\n"),
    );
    assert.equal(removalPlan("*raw\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"), "");
  });

  it("tells an emptied nf_tables table from one with rules", () => {
    assert.deepEqual(parseNftTables("table ip filter\ntable ip6 nat\n"), ["ip filter", "ip6 nat"]);
    const empty =
      "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\n";
    assert.equal(isEmptyNftTable(empty), true);
    const withRule = empty.replace(
      "policy accept;\n",
      "policy accept;\n\t\tcounter packets 0 bytes 0 drop\n",
    );
    assert.equal(isEmptyNftTable(withRule), false);
    assert.equal(isEmptyNftTable(empty.replace("policy accept", "policy drop")), false);
  });

  it("reads mount points, escapes included", () => {
    const mounts = parseMountInfo(
      "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
        "40 36 0:33 / /run/netns/cni-1 rw shared:5 - nsfs nsfs rw\n",
    );
    assert.deepEqual(
      mounts.map((m) => [m.mountPoint, m.fsType, m.options]),
      [
        ["/mnt/with space", "ext3", "rw,noatime"],
        ["/run/netns/cni-1", "nsfs", "rw"],
      ],
    );
  });
});

describe("OCI image packer", () => {
  const spec = {
    name: "mlmodel.local/test:1",
    entries: [
      { path: "bin/tool", type: "file" as const, mode: 0o755, content: Buffer.from("#!/bin/sh\necho hi\n") },
      { path: "bin/alias", type: "symlink" as const, target: "/bin/tool" },
      { path: "tmp", type: "dir" as const, mode: 0o1777 },
    ],
    entrypoint: ["/bin/tool"],
    user: "65534",
  };

  const pack = async (s: typeof spec) => {
    const archive = join(scratchDir("oci"), "image.tar");
    return { ...(await packImage(s, archive)), bytes: readFileSync(archive) };
  };

  it("is reproducible: the same files give the same digest and the same archive", async () => {
    const [a, b] = [await pack(spec), await pack(spec)];
    assert.equal(a.digest, b.digest);
    assert.deepEqual(a.bytes, b.bytes);
    assert.notEqual((await pack({ ...spec, user: "0" })).digest, a.digest);
  });

  it("writes an OCI layout that tar reads, with the image named for containerd", async () => {
    const dir = scratchDir("oci");
    const archive = join(dir, "image.tar");
    await packImage(spec, archive);
    const listing = execFileSync("tar", ["-tf", archive], { encoding: "utf8" }).split("\n").filter(Boolean);
    assert.ok(listing.includes("oci-layout"));
    assert.ok(listing.includes("index.json"));
    assert.ok(listing.includes("manifest.json"), "docker load's manifest too");
    assert.equal(listing.filter((p) => p.startsWith("blobs/sha256/") && p.length > 20).length, 3);
    const out = join(dir, "x");
    mkdirSync(out);
    execFileSync("tar", ["-xf", archive, "-C", out]);
    const index = JSON.parse(execFileSync("cat", [join(out, "index.json")], { encoding: "utf8" }));
    assert.equal(index.manifests[0].annotations["io.containerd.image.name"], "mlmodel.local/test:1");
    const manifestPath = join(out, "blobs", "sha256", index.manifests[0].digest.slice(7));
    const manifest = JSON.parse(execFileSync("cat", [manifestPath], { encoding: "utf8" }));
    const layerPath = join(out, "blobs", "sha256", manifest.layers[0].digest.slice(7));
    const layerTar = join(dir, "layer.tar");
    writeFileSync(layerTar, gunzipSync(execFileSync("cat", [layerPath])));
    const layer = execFileSync("tar", ["-tvf", layerTar], { encoding: "utf8" });
    assert.match(layer, /^drwxr-xr-x 0\/0 .* bin\/$/m);
    assert.match(layer, /^lrwxrwxrwx 0\/0 .* bin\/alias -> \/bin\/tool$/m);
    assert.match(layer, /^-rwxr-xr-x 0\/0 .* bin\/tool$/m);
    assert.match(layer, /^drwxrwxrwt 0\/0 .* tmp\/$/m);
  });

  it("adds parent directories and sorts entries", () => {
    const entries = normaliseEntries([
      { path: "/a/b/c", type: "file", mode: 0o644, content: Buffer.from("x") },
    ]);
    assert.deepEqual(
      entries.map((e) => `${e.type}:${e.path}`),
      ["dir:a", "dir:a/b", "file:a/b/c"],
    );
    assert.equal(tarArchive([]).length, 1024);
  });
});

const lockPath = () => join(scratchDir("lock"), "real-node.lock");
const noop = () => {};
/** Options for a lock at `path` held for `dir`, whose other holders are (not) alive. */
const lockOptions = (path: string, dir: string, othersAlive: boolean, extra: { reserve?: boolean } = {}) => ({
  lockPath: path,
  dir,
  isAlive: async () => othersAlive,
  waitMs: 0,
  progress: noop,
  ...extra,
});

describe("machine lock", () => {
  it("refuses a live holder, naming its dir and how to wait", async () => {
    const path = lockPath();
    await acquireMachineLock(lockOptions(path, "/c/one", true));
    await assert.rejects(acquireMachineLock(lockOptions(path, "/c/two", true)), (err: Error) => {
      assert.ok(err instanceof MachineLockError);
      assert.match(err.message, /held by the cluster in \/c\/one/);
      assert.match(err.message, /mlmodel cluster down --dir \/c\/one/);
      assert.match(err.message, /--node-wait/);
      return true;
    });
  });

  it("takes over from a dead holder and says so", async () => {
    const path = lockPath();
    await acquireMachineLock(lockOptions(path, "/c/one", true));
    const result = await acquireMachineLock(lockOptions(path, "/c/two", false));
    assert.equal(result.takenOver?.dir, "/c/one");
    assert.equal((await readLock(path))?.dir, "/c/two");
  });

  it("waits for a holder that lets go, with a visible message", async () => {
    const path = lockPath();
    await acquireMachineLock(lockOptions(path, "/c/one", true));
    const messages: string[] = [];
    setTimeout(() => void releaseMachineLock(path, "/c/one"), 1500);
    const result = await acquireMachineLock({
      ...lockOptions(path, "/c/two", true),
      waitMs: 60_000,
      progress: (line: string) => messages.push(line),
    });
    assert.equal(result.takenOver, undefined);
    assert.equal((await readLock(path))?.dir, "/c/two");
    assert.equal(messages.length, 1);
    assert.match(messages[0]!, /held by the cluster in \/c\/one.*waiting up to \d+s/);
  });

  it("is released only by the dir that holds it", async () => {
    const path = lockPath();
    await acquireMachineLock(lockOptions(path, "/c/one", true));
    await releaseMachineLock(path, "/c/two");
    assert.equal((await readLock(path))?.dir, "/c/one");
    await releaseMachineLock(path, "/c/one");
    assert.equal(await readLock(path), undefined);
  });
});

describe("real node certificates", () => {
  it("gives kubelet a node identity and a serving cert for its IP; the API server names the node IP", async () => {
    const pki = await generatePki({ nodeName: "mlmodel-node", nodeIp: "10.77.0.1" });
    const dir = scratchDir("pki-node");
    const text = (pem: string, ...args: string[]) => {
      const path = join(dir, `cert-${Math.random()}.pem`);
      writeFileSync(path, pem);
      return execFileSync("openssl", ["x509", "-noout", ...args, "-in", path], { encoding: "utf8" });
    };
    assert.match(
      text(pki.clients.kubelet!.certPem, "-subject"),
      /CN ?= ?system:node:mlmodel-node, O ?= ?system:nodes/,
    );
    assert.doesNotMatch(text(pki.clients["kube-proxy"]!.certPem, "-subject"), /system:masters/);
    assert.match(text(pki.clients["kube-proxy"]!.certPem, "-subject"), /CN ?= ?system:kube-proxy/);
    assert.match(
      text(pki.realNode!.kubeletServing.certPem, "-ext", "subjectAltName"),
      /IP Address:10\.77\.0\.1/,
    );
    assert.match(
      text(pki.realNode!.kubeletServing.certPem, "-ext", "extendedKeyUsage"),
      /Server Authentication/,
    );
    assert.match(
      text(pki.realNode!.apiserverKubeletClient.certPem, "-ext", "extendedKeyUsage"),
      /Client Authentication/,
    );
    assert.match(text(pki.apiserver.certPem, "-ext", "subjectAltName"), /IP Address:10\.77\.0\.1/);
    const plain = await generatePki();
    assert.doesNotMatch(text(plain.apiserver.certPem, "-ext", "subjectAltName"), /10\.77\.0\.1/);
    assert.equal(plain.realNode, undefined);
  });
});

describe("machine lock reservations", () => {
  it("outlive the node's own release, and end with their owner's", async () => {
    const path = lockPath();
    await acquireMachineLock(lockOptions(path, "/c/one", false, { reserve: true }));
    // up in the same dir is re-entrant; its down lets go of the node, not of the reservation.
    assert.equal((await acquireMachineLock(lockOptions(path, "/c/one", false))).takenOver, undefined);
    await releaseMachineLock(path, "/c/one");
    assert.equal((await readLock(path))?.reservedBy?.pid, process.pid);
    await releaseMachineLock(path, "/c/one", { reservation: true });
    assert.equal(await readLock(path), undefined);
  });

  it("count as a live holder while the reserving process runs", async () => {
    const path = lockPath();
    await acquireMachineLock(lockOptions(path, "/c/one", false, { reserve: true }));
    const holder = await readLock(path);
    assert.equal(
      await takerAlive({ ...holder!, pid: 2 ** 22 + 1 }),
      true,
      "the taker is gone, the reserver is not",
    );
    assert.equal(await takerAlive({ ...holder!, pid: 2 ** 22 + 1, reservedBy: undefined }), false);
  });
});

describe("real node prerequisites", () => {
  it("names each missing command with its Debian package", () => {
    const path = process.env.PATH;
    process.env.PATH = "/nonexistent";
    try {
      const missing = missingRequirements();
      const containerd = missing.find((r) => r.path === "containerd");
      assert.equal(containerd?.pkg, "containerd");
      assert.ok(missing.some((r) => r.path === "nsenter" && r.pkg === "util-linux"));
    } finally {
      process.env.PATH = path;
    }
  });

  it("says why when apt-get cannot install them (its own words, and what to run)", async () => {
    const bin = scratchDir("fake-apt");
    const log = join(bin, "calls");
    writeFileSync(
      join(bin, "apt-get"),
      `#!/bin/sh\necho "$@" >> ${log}\necho "E: Unable to locate package $4" >&2\nexit 100\n`,
      { mode: 0o755 },
    );
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    try {
      await assert.rejects(
        aptInstall(["no-such-package"], () => {}),
        (err: Error) => {
          assert.ok(err instanceof PrerequisiteError);
          assert.match(err.message, /apt-get could not install no-such-package \(exit 100\)/);
          assert.match(err.message, /Unable to locate package/);
          assert.match(err.message, /apt-get install -y no-such-package/);
          return true;
        },
      );
    } finally {
      process.env.PATH = path;
    }
    // It refreshed the package lists once before giving up.
    assert.match(execFileSync("cat", [log], { encoding: "utf8" }), /^install .*\nupdate .*\ninstall /);
  });

  it("does not try apt-get without root: it says what to run as root", async () => {
    await assert.rejects(
      aptInstall(["curl", "openssl"], () => {}, { uid: 65534 }),
      {
        name: "PrerequisiteError",
        message: "installing Debian packages needs root: run sudo apt-get install -y curl openssl",
      },
    );
  });

  it("is not supported without root, and says so", async () => {
    const support = await realNodeSupport({ uid: 65534 });
    assert.equal(support.ok, false);
    assert.match(support.ok ? "" : support.reason, /needs root/);
  });
});
