// The agent's Kubernetes side against the real control plane: `mlmodel node-cache` runs as a
// child process for a kwok node; EndpointSlices made by hand give it its peer (an agent
// in-process on this machine's address: the API server refuses loopback endpoints), a pod on its node with the cache-key label marks an entry in use,
// and its state ConfigMap appears with what it holds. SIGTERM stops it cleanly.
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { mlModelCrd } from "../../../src/api/crds.ts";
import { entriesBudget } from "../../../src/cli/commands/node-cache.ts";
import { mlmodelResource } from "../../../src/downloader/contract.ts";
import { shortBytes } from "../../../src/downloader/progress.ts";
import { NodeCacheAgent } from "../../../src/nodecache/agent.ts";
import { AgentClient } from "../../../src/nodecache/client.ts";
import {
  cacheKey,
  cacheKeyLabel,
  type NodeCacheState,
  nodeCacheApi,
  nodeCacheComponentLabels,
  nodeCacheServiceName,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "../../../src/nodecache/contract.ts";
import { requestJson } from "../../../src/nodecache/http.ts";
import { endpointSliceKind, listInUseKeys, listPeers } from "../../../src/nodecache/kube.ts";
import { ContentStore } from "../../../src/nodecache/store.ts";
import {
  builtinKinds,
  KubeClient,
  type KubeObject,
  kubeConnection,
  loadKubeConfig,
} from "../../../src/runtime/index.ts";
import { createNamespace, type TestNamespace, waitFor } from "../../harness/cluster.ts";

const mainTs = join(import.meta.dirname, "..", "..", "..", "src", "cli", "main.ts");
const root = mkdtempSync(join(tmpdir(), "nodecache-kube-"));

/** An address of this machine the API server accepts in an EndpointSlice (not loopback). */
function hostAddress(): string {
  const address = Object.values(networkInterfaces())
    .flat()
    .find((i) => i && i.family === "IPv4" && !i.internal && !i.address.startsWith("169.254."))?.address;
  assert.ok(address, "this machine has a non-loopback IPv4 address for the peer's endpoint");
  return address;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe("node cache agent on the control plane", () => {
  const client = new KubeClient(kubeConnection(loadKubeConfig()), { userAgent: "nodecache-test" });
  let ns: TestNamespace;
  let node: string;
  let peer: NodeCacheAgent;
  let peerPort: number;
  let peerAddress: string;
  let child: ChildProcess | undefined;
  let agentUrl: string;
  let stderr = "";
  const key = cacheKey(`https://origin.example/kube/${randomBytes(4).toString("hex")}`, undefined);

  before(async () => {
    ns = await createNamespace("nodecache");
    const nodes = await client.list(builtinKinds.Node);
    node = nodes.items.map((n) => n.metadata?.name ?? "").find((n) => n.startsWith("kwok-node-")) ?? "";
    assert.ok(node, "the cluster has a kwok node");

    peer = new NodeCacheAgent({
      store: await ContentStore.open(join(root, "peer"), 1 << 20),
      node: "peer-node",
      peers: async () => [],
      inUseKeys: async () => new Set(),
    });
    peerAddress = hostAddress();
    const peerUrl = await peer.listen(0, peerAddress);
    peerPort = Number(new URL(peerUrl).port);
    const src = join(root, "src");
    mkdirSync(src);
    writeFileSync(join(src, "w.bin"), randomBytes(50_000));
    await new AgentClient(peerUrl, {
      deadline: Date.now() + 30_000,
      idleTimeoutMs: 10_000,
      parallel: 2,
      log: () => {},
    }).upload(key, "https://origin.example/kube", src, new Set());

    // What the EndpointSlice controller would write for the Service: the peer ready, this
    // node's own endpoint (excluded), and a not-ready endpoint (excluded).
    await client.create(endpointSliceKind, {
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      metadata: {
        name: `${nodeCacheServiceName}-test`,
        namespace: ns.name,
        labels: {
          "kubernetes.io/service-name": nodeCacheServiceName,
          "endpointslice.kubernetes.io/managed-by": "nodecache-test",
        },
      },
      addressType: "IPv4",
      ports: [{ name: "http", port: peerPort, protocol: "TCP" }],
      endpoints: [
        { addresses: [peerAddress], nodeName: "peer-node", conditions: { ready: true } },
        { addresses: ["10.255.0.9"], nodeName: node, conditions: { ready: true } },
        { addresses: ["10.255.0.10"], nodeName: "gone-node", conditions: { ready: false } },
      ],
    } as KubeObject);
    await client.create(builtinKinds.Pod, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "serving", namespace: ns.name, labels: { [cacheKeyLabel]: key } },
      spec: {
        nodeName: node,
        tolerations: [{ operator: "Exists" }],
        containers: [{ name: "server", image: "example.invalid/server:1" }],
      },
    } as KubeObject);
  });

  after(async () => {
    if (child && child.exitCode === null) child.kill("SIGKILL");
    await peer?.close();
    await client
      .delete(builtinKinds.ConfigMap, { namespace: ns.name, name: nodeCacheStateConfigMap(node) })
      .catch(() => {});
    await ns?.delete();
    rmSync(root, { recursive: true, force: true });
  });

  it("reads its peers from the Service's EndpointSlices and the keys in use from the pods on its node", async () => {
    assert.deepEqual(await listPeers(client, ns.name, node), [
      { node: "peer-node", url: `http://${peerAddress}:${peerPort}` },
    ]);
    const inUse = await listInUseKeys(client, node);
    assert.ok(inUse.has(key), `the pod's key is in use on ${node}: ${[...inUse].join(",")}`);
    assert.equal(
      (await listInUseKeys(client, "peer-node")).has(key),
      false,
      "a pod on another node does not count",
    );
  });

  it("download --cache reports in the MLModel's status that the bytes came from the node cache", async () => {
    const { group, version, plural, kind } = mlmodelResource;
    const mlmodels = { group, version, kind, plural, namespaced: true };
    await client.apply(builtinKinds.CustomResourceDefinition, mlModelCrd as never, {
      fieldManager: "nodecache-test",
      force: true,
    });
    await waitFor("the MLModel CRD to be served", () => client.list(mlmodels, { namespace: ns.name }));
    await client.create(mlmodels, {
      apiVersion: `${group}/${version}`,
      kind,
      metadata: { name: "cached", namespace: ns.name },
      spec: { model: { uri: "http://origin.invalid/model.bin", format: "onnx" }, storage: { size: "1Gi" } },
    } as KubeObject);
    const peerUrl = `http://${peerAddress}:${peerPort}`;
    const args = [
      "download",
      "--uri",
      "http://origin.invalid/model.bin",
      "--dest",
      join(root, "scratch", "model"),
    ];
    const { stderr: out } = await promisify(execFile)(
      process.execPath,
      [mainTs, ...args, "--cache", peerUrl, "--cache-key", key],
      { env: { ...process.env, MLMODEL_NAME: "cached", MLMODEL_NAMESPACE: ns.name } },
    );
    assert.doesNotMatch(out, /warning: status patch/);
    const model = (await client.get(mlmodels, { namespace: ns.name, name: "cached" })) as KubeObject & {
      status?: { download?: Record<string, unknown> };
    };
    const d = model.status?.download ?? {};
    assert.equal(d.phase, "Complete");
    assert.equal(d.bytesDone, 0);
    assert.equal(d.progress, `node cache ${shortBytes(50_000)}`);
    assert.match(
      String(d.message),
      new RegExp(
        `^copied from node cache: entry ${key}, 1 file\\(s\\), ${shortBytes(50_000)}, 0 bytes from the origin$`,
      ),
    );
  });

  it("runs as `mlmodel node-cache`: copies from its peer, writes its state ConfigMap, stops on SIGTERM", async () => {
    const port = await freePort();
    agentUrl = `http://127.0.0.1:${port}`;
    const args = ["node-cache", "--dir", join(root, "agent"), "--budget", "100Mi", "--port", String(port)];
    child = spawn(process.execPath, [mainTs, ...args, "--state-interval", "1", "--in-use-interval", "1"], {
      env: { ...process.env, NODE_NAME: node, POD_NAMESPACE: ns.name },
      stdio: ["ignore", "ignore", "pipe"],
    });
    child.stderr?.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    const exited = new Promise<number | null>((resolve) => child!.once("exit", (code) => resolve(code)));
    await waitFor(
      "the agent to serve",
      () => requestJson(`${agentUrl}${nodeCacheApi.health}`, { idleTimeoutMs: 2000 }),
      {
        describe: async () => stderr,
      },
    );

    const manifest = await requestJson<{ key: string }>(`${agentUrl}${nodeCacheApi.ensure(key)}`, {
      method: "POST",
      idleTimeoutMs: 30_000,
    });
    assert.equal(manifest.key, key);

    const state = await waitFor(
      "the state ConfigMap to show the entry, copied from peer-node and in use",
      async () => {
        const cm = await client.get(builtinKinds.ConfigMap, {
          namespace: ns.name,
          name: nodeCacheStateConfigMap(node),
        });
        const s = JSON.parse(
          (cm as { data?: Record<string, string> }).data?.[nodeCacheStateKey] ?? "{}",
        ) as NodeCacheState;
        const e = s.entries?.find((x) => x.key === key);
        return e?.source === "peer" && e.peer === "peer-node" && e.inUse ? { cm, s } : undefined;
      },
      { describe: async () => stderr },
    );
    assert.equal(state.s.node, node);
    assert.equal(
      state.s.budgetBytes,
      entriesBudget(100 << 20),
      "the budget less what the cache's own files keep",
    );
    assert.equal(state.s.usedBytes, 50_000);
    assert.equal(state.s.bytesFromPeers, 50_000);
    assert.deepEqual(
      Object.fromEntries(
        Object.entries(state.cm?.metadata?.labels ?? {}).filter(([k]) => k in nodeCacheComponentLabels),
      ),
      { ...nodeCacheComponentLabels },
    );

    child.kill("SIGTERM");
    assert.equal(await exited, 0, stderr);
    assert.match(stderr, /stopping/);
  });
});
