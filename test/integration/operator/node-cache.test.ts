/**
 * The operator's side of the node cache on the real control plane (kwok nodes: no agent runs,
 * nothing is downloaded). The operator finds the node cache's Service at start; a NodeCache
 * model's download Job and Deployment carry the flags, the init container and the spread; no
 * claim is made; state ConfigMaps written by hand (as the agents write them) show up in
 * status.cache, and a change of one is seen without any change to the model; a succeeded
 * download whose key no running agent (a pod made by hand on a kwok node) lists any more is
 * run again.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { V1Deployment, V1Job } from "@kubernetes/client-node";
import pino from "pino";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { install } from "../../../src/install/install.ts";
import { nodeCacheService } from "../../../src/install/node-cache.ts";
import {
  cacheKey,
  cacheKeyLabel,
  type NodeCacheState,
  nodeCacheComponentLabels,
  nodeCachePort,
  nodeCacheStateConfigMap,
  nodeCacheStateKey,
} from "../../../src/nodecache/contract.ts";
import { labels } from "../../../src/operator/names.ts";
import { createOperator } from "../../../src/operator/run.ts";
import { builtinKinds, KubeClient, type KubeObject, type Manager } from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";

const uri = "https://models.example.com/iris/model.joblib";
const sha = "c".repeat(64);
const key = cacheKey(uri, sha);

function stateOf(node: string, source: "origin" | "peer", peer?: string): NodeCacheState {
  return {
    node,
    budgetBytes: 10_000_000,
    usedBytes: 4096,
    bytesFromPeers: source === "peer" ? 4096 : 0,
    bytesFromOrigin: source === "origin" ? 4096 : 0,
    evictions: 0,
    updatedAt: new Date().toISOString(),
    entries: [
      {
        key,
        uri,
        size: 4096,
        files: 1,
        source,
        ...(peer ? { peer } : {}),
        completedAt: new Date().toISOString(),
        lastUsedAt: new Date().toISOString(),
        inUse: true,
      },
    ],
  };
}

describe("a NodeCache model on the real control plane", () => {
  let models: TestNamespace;
  let system: TestNamespace;
  let admin: KubeClient;
  let mgr: Manager;
  let url: string;
  const abort = new AbortController();
  let running: Promise<void> | undefined;

  const writeState = (state: NodeCacheState) =>
    admin.apply(
      builtinKinds.ConfigMap,
      {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: {
          name: nodeCacheStateConfigMap(state.node),
          namespace: system.name,
          labels: { ...nodeCacheComponentLabels },
        },
        data: { [nodeCacheStateKey]: JSON.stringify(state) },
      } as KubeObject,
      { fieldManager: "node-cache-test", force: true },
    );
  const model = () => admin.get<MLModel>(mlModelKind, { namespace: models.name, name: "iris" });

  before(async () => {
    admin = KubeClient.fromKubeConfig(kubeConfig());
    await install(admin);
    models = await createNamespace("nc-models", { podSecurity: "restricted" });
    system = await createNamespace("nc-system", { podSecurity: "restricted" });
    // The agents' Service alone: the operator finds the node cache by it.
    const service = await admin.apply(builtinKinds.Service, nodeCacheService(system.name), {
      fieldManager: "node-cache-test",
      force: true,
    });
    url = `http://${(service as { spec?: { clusterIP?: string } }).spec?.clusterIP}:${nodeCachePort}`;
    mgr = await createOperator({
      kubeConfig: kubeConfig(),
      // The operator's own namespace is watched too: its agents' states are there.
      namespaces: [models.name, system.name],
      nodeCacheNamespace: system.name,
      downloaderImage: "example.com/mlmodel:test",
      logger: pino({ level: "warn" }),
      metricsBindAddress: "0",
      healthProbeBindAddress: "0",
    });
    running = mgr.start(abort.signal);
    await waitFor("operator caches to sync", async () => mgr.cachesSynced());
    await admin.apply(
      mlModelKind,
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name: "iris", namespace: models.name },
        spec: { model: { uri, sha256: sha, format: "sklearn" }, replicas: 3, storage: { size: "1Gi" } },
      } as KubeObject,
      { fieldManager: "node-cache-test", force: true },
    );
  });

  after(async () => {
    abort.abort();
    await running;
    await models?.delete();
    await system?.delete();
  });

  it("downloads through the node's agent into scratch space, with no claim", async () => {
    const job = await waitFor("the download Job", async () => {
      const jobs = await admin.list<V1Job & KubeObject>(builtinKinds.Job, {
        namespace: models.name,
        labelSelector: `${labels.model}=iris`,
      });
      return jobs.items[0];
    });
    const args = job.spec!.template.spec!.containers[0]!.args!;
    assert.deepEqual(args.slice(args.indexOf("--cache")), ["--cache", url, "--cache-key", key]);
    assert.deepEqual(job.spec!.template.spec!.volumes?.find((v) => v.name === "scratch")?.emptyDir, {
      sizeLimit: "1Gi",
    });
    const claims = await admin.list(builtinKinds.PersistentVolumeClaim, { namespace: models.name });
    assert.equal(claims.items.length, 0);
  });

  it("serves with pods that copy from the agent first, labelled with the key, spread over nodes and zones", async () => {
    const deployment = await waitFor("the Deployment", () =>
      admin.get<V1Deployment & KubeObject>(builtinKinds.Deployment, { namespace: models.name, name: "iris" }),
    );
    const template = deployment.spec!.template;
    const init = template.spec!.initContainers?.[0];
    assert.equal(init?.name, "cache-copy");
    assert.equal(init?.image, "example.com/mlmodel:test");
    assert.deepEqual(init?.args?.slice(0, 4), ["--cache", url, "--key", key]);
    assert.equal(template.metadata?.labels?.[cacheKeyLabel], key);
    assert.deepEqual(
      template.spec!.topologySpreadConstraints?.map((c) => c.topologyKey),
      ["kubernetes.io/hostname"],
    );
    const zone = template.spec!.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution;
    assert.equal(zone?.[0]?.podAffinityTerm.topologyKey, "topology.kubernetes.io/zone");
    const m = await waitFor("status.storageMode", async () => {
      const found = await model();
      return found?.status?.storageMode ? found : undefined;
    });
    assert.equal(m.status?.storageMode, "NodeCache");
    assert.equal(m.status?.cache?.key, key);
    assert.equal(m.status?.conditions?.find((c) => c.type === "StorageReady")?.reason, "NodeCache");
    const ready = await waitFor("the model Ready", async () => {
      const found = await model();
      return found?.status?.phase === "Ready" ? found : undefined;
    });
    assert.equal(ready.status?.readyReplicas, 3);
    const pods = await admin.list<KubeObject & { spec?: { nodeName?: string } }>(builtinKinds.Pod, {
      namespace: models.name,
      labelSelector: `${labels.model}=iris,${labels.component}=server`,
    });
    const nodes = new Set(pods.items.map((p) => p.spec?.nodeName));
    assert.equal(nodes.size, 3, "one replica on each of the 3 nodes, with no placement given");
  });

  it("shows what the agents report per node, and a new report without a change to the model", async () => {
    await writeState(stateOf("node-a", "origin"));
    const one = await waitFor("node-a in status.cache", async () => {
      const found = await model();
      return found?.status?.cache?.nodesCached === 1 ? found : undefined;
    });
    const { completedAt, ...shown } = one.status?.cache?.nodes?.[0] ?? {};
    assert.deepEqual(shown, { node: "node-a", size: 4096, files: 1, source: "Origin", inUse: true });
    assert.ok(completedAt, "when the node completed it");
    const generation = one.metadata.generation;
    await writeState(stateOf("node-b", "peer", "node-a"));
    const two = await waitFor("node-b in status.cache", async () => {
      const found = await model();
      return found?.status?.cache?.nodesCached === 2 ? found : undefined;
    });
    assert.equal(two.metadata.generation, generation, "the model itself did not change");
    assert.equal(two.status?.cache?.bytesFromOrigin, 4096);
    assert.equal(two.status?.cache?.bytesFromPeers, 4096);
    assert.deepEqual(
      two.status?.cache?.nodes?.map((n) => [n.node, n.source, n.peer ?? ""]),
      [
        ["node-a", "Origin", ""],
        ["node-b", "Peer", "node-a"],
      ],
    );
  });

  it("runs a succeeded download again once no running agent lists its key, and not while one does", async () => {
    const uri2 = "https://models.example.com/iris/model-2.joblib";
    const sha2 = "d".repeat(64);
    const key2 = cacheKey(uri2, sha2);
    await admin.apply(
      mlModelKind,
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "MLModel",
        metadata: { name: "again", namespace: models.name },
        spec: { model: { uri: uri2, sha256: sha2, format: "sklearn" }, storage: { size: "1Gi" } },
      } as KubeObject,
      { fieldManager: "node-cache-test", force: true },
    );
    const downloadJobs = async () =>
      (
        await admin.list<V1Job & KubeObject>(builtinKinds.Job, {
          namespace: models.name,
          labelSelector: `${labels.model}=again,${labels.component}=download`,
        })
      ).items;
    const first = await waitFor("the download Job to succeed", async () =>
      (await downloadJobs()).find((j) =>
        j.status?.conditions?.some((c) => c.type === "Complete" && c.status === "True"),
      ),
    );
    const ranOn = await waitFor("the node the download ran on", async () => {
      const pods = await admin.list<
        KubeObject & { spec?: { nodeName?: string }; status?: { phase?: string } }
      >(builtinKinds.Pod, {
        namespace: models.name,
        labelSelector: `${labels.model}=again,${labels.component}=download`,
      });
      return pods.items.find((p) => p.status?.phase === "Succeeded")?.spec?.nodeName;
    });
    const nodes = ["kwok-node-0", "kwok-node-1", "kwok-node-2"];
    // Written after the Job completed, as the agents would; iris's key stays listed (its own
    // download is not in question here).
    const listing = (node: string, keys: string[]): NodeCacheState => {
      const s = stateOf(node, "origin");
      const entry = s.entries[0]!;
      return { ...s, updatedAt: new Date().toISOString(), entries: keys.map((k) => ({ ...entry, key: k })) };
    };
    for (const node of nodes) await writeState(listing(node, node === ranOn ? [key, key2] : [key]));
    // An agent pod on each node: the states above are of agents that run. The one where the Job
    // ran comes first, as it is in a cluster (its agent received the download): while only
    // others ran, the operator would rightly judge the entry gone with that node's agent.
    for (const node of [ranOn, ...nodes.filter((n) => n !== ranOn)]) {
      await admin.apply(
        builtinKinds.Pod,
        {
          apiVersion: "v1",
          kind: "Pod",
          metadata: {
            name: `agent-${node}`,
            namespace: system.name,
            labels: { ...nodeCacheComponentLabels },
          },
          spec: {
            nodeName: node,
            securityContext: {
              runAsNonRoot: true,
              runAsUser: 1000,
              seccompProfile: { type: "RuntimeDefault" },
            },
            containers: [
              {
                name: "agent",
                image: "example.com/mlmodel:test",
                securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
              },
            ],
          },
        } as KubeObject,
        { fieldManager: "node-cache-test", force: true },
      );
    }
    await waitFor("the model's status to show the node that lists its key", async () => {
      const found = await admin.get<MLModel>(mlModelKind, { namespace: models.name, name: "again" });
      return found?.status?.cache?.nodes?.some((n) => n.node === ranOn) ? found : undefined;
    });
    assert.deepEqual(
      (await downloadJobs()).map((j) => j.metadata.uid),
      [first.metadata.uid],
      "a node holds the version: its Job is kept",
    );

    // The node that held it evicts it; no other lists it.
    for (const node of nodes) await writeState(listing(node, [key]));
    const second = await waitFor("a new download Job", async () =>
      (await downloadJobs()).find((j) => j.metadata.uid !== first.metadata.uid),
    );
    assert.equal(second.metadata.name, first.metadata.name, "the same Job, by its content, run again");
    const told = await waitFor("the CacheEntryGone Event", async () => {
      const events = await admin.list<KubeObject & { reason?: string; note?: string; type?: string }>(
        builtinKinds.Event,
        { namespace: models.name },
      );
      return events.items.find((e) => e.reason === "CacheEntryGone");
    });
    assert.equal(told.type, "Warning");
    assert.match(told.note ?? "", new RegExp(`no node holds cache entry ${key2}: none of the 3 running`));
  });

  it("refuses NodeCache for a pvc:// model at admission, naming the field and what would do", async () => {
    await assert.rejects(
      admin.apply(
        mlModelKind,
        {
          apiVersion: "serving.mlmodel.dev/v1alpha1",
          kind: "MLModel",
          metadata: { name: "mounted", namespace: models.name },
          spec: { model: { uri: "pvc://models/iris", format: "sklearn" }, storage: { mode: "NodeCache" } },
        } as KubeObject,
        { fieldManager: "node-cache-test", force: true },
      ),
      /spec\.storage\.mode.*pvc:\/\/ model is mounted in place: use storage\.mode Auto or Claim/s,
    );
  });
});
