/**
 * Shared by the operator e2e tests: install the operator's bundle as the admin, then run the
 * operator in this process under its own ServiceAccount (the generated least-privilege RBAC,
 * not admin), scoped to the test's namespace, counting every API request it makes.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import pino from "pino";
import { parseAllDocuments } from "yaml";
import { mlModelKind, servingRuntimeKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { install } from "../../../src/install/install.ts";
import { defaultOperatorNamespace } from "../../../src/install/manifests.ts";
import { operatorName } from "../../../src/operator/names.ts";
import { createOperator } from "../../../src/operator/run.ts";
import {
  builtinKinds,
  KubeClient,
  type KubeObject,
  type RequestRecord,
  type ResourceKind,
} from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";

export const repoRoot = join(import.meta.dirname, "..", "..", "..");

export async function adminClient(kc: KubeConfig = kubeConfig()): Promise<KubeClient> {
  return KubeClient.fromKubeConfig(kc);
}

const kinds: Record<string, ResourceKind> = {
  MLModel: mlModelKind,
  ServingRuntime: servingRuntimeKind,
  Secret: builtinKinds.Secret,
  ConfigMap: builtinKinds.ConfigMap,
};

export function readSample(file: string): KubeObject[] {
  return parseAllDocuments(readFileSync(join(repoRoot, "samples", file), "utf8")).map(
    (d) => d.toJS() as KubeObject,
  );
}

export async function applyObjects(
  client: KubeClient,
  namespace: string,
  objects: KubeObject[],
): Promise<void> {
  for (const obj of objects) {
    const kind = kinds[obj.kind];
    if (!kind) throw new Error(`test cannot apply kind ${obj.kind}`);
    await client.apply(
      kind,
      { ...obj, metadata: { ...obj.metadata, namespace } },
      { fieldManager: "e2e", force: true },
    );
  }
}

/** A claim of the user's (as for pvc:// models), with its volume; returns the volume's name. */
export async function userClaim(client: KubeClient, namespace: string, claim: string): Promise<string> {
  await client.apply(
    builtinKinds.PersistentVolumeClaim,
    {
      apiVersion: "v1",
      kind: "PersistentVolumeClaim",
      metadata: { name: claim, namespace },
      spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
    },
    { fieldManager: "e2e", force: true },
  );
  return provideVolume(client, namespace, claim);
}

/** A hostPath PersistentVolume pre-bound to the claim: the local control plane has no provisioner. */
export async function provideVolume(client: KubeClient, namespace: string, claim: string): Promise<string> {
  const name = `${namespace}-${claim}`;
  await client.apply(
    builtinKinds.PersistentVolume,
    {
      apiVersion: "v1",
      kind: "PersistentVolume",
      metadata: { name, labels: { "mlmodel.dev/test": "true" } },
      spec: {
        capacity: { storage: "20Gi" },
        accessModes: ["ReadWriteOnce", "ReadWriteMany"],
        hostPath: { path: `/tmp/mlmodel-e2e/${name}` },
        claimRef: { namespace, name: claim },
        persistentVolumeReclaimPolicy: "Delete",
      },
    },
    { fieldManager: "e2e", force: true },
  );
  return name;
}

export interface RunningOperator {
  client: KubeClient;
  /** Requests made so far, by verb. */
  requests: RequestRecord[];
  writes(): number;
  stop(): Promise<void>;
}

const writeVerbs = new Set(["create", "update", "patch", "apply", "delete"]);

export interface OperatorOptions {
  /** The cluster's admin kubeconfig (default: the run's shared cluster). */
  adminKc?: KubeConfig;
  /** How often the operator asks whether HTTPRoutes are served (default 30 s). */
  servedPollIntervalMs?: number;
  /** The download Job's image (the operator's --downloader-image); default: the operator's default. */
  downloaderImage?: string;
  /**
   * Where the node cache is installed (installNodeCache): the operator finds its Service there
   * and watches that namespace too, for the agents' state ConfigMaps.
   */
  nodeCacheNamespace?: string;
}

export async function startOperator(
  namespace: string,
  options: OperatorOptions = {},
): Promise<RunningOperator> {
  const adminKc = options.adminKc ?? kubeConfig();
  const admin = await adminClient(adminKc);
  await install(admin);
  const cluster = adminKc.getCurrentCluster()!;
  const token = await requestToken(adminKc);
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "local", server: cluster.server, caData: cluster.caData, skipTLSVerify: false }],
    users: [{ name: operatorName, token }],
    contexts: [{ name: "operator", cluster: "local", user: operatorName }],
    currentContext: "operator",
  });
  const mgr = await createOperator({
    kubeConfig: kc,
    namespaces: options.nodeCacheNamespace ? [namespace, options.nodeCacheNamespace] : [namespace],
    ...(options.nodeCacheNamespace ? { nodeCacheNamespace: options.nodeCacheNamespace } : {}),
    logger: pino({ level: "warn" }),
    ...(options.servedPollIntervalMs !== undefined
      ? { servedPollIntervalMs: options.servedPollIntervalMs }
      : {}),
    ...(options.downloaderImage ? { downloaderImage: options.downloaderImage } : {}),
  });
  const requests: RequestRecord[] = [];
  mgr.client.onRequest((r) => requests.push(r));
  const abort = new AbortController();
  const running = mgr.start(abort.signal);
  await waitFor("operator caches to sync", async () => mgr.cachesSynced());
  return {
    client: mgr.client,
    requests,
    writes: () => requests.filter((r) => writeVerbs.has(r.verb)).length,
    async stop() {
      abort.abort();
      await running;
    },
  };
}

async function requestToken(kc: KubeConfig): Promise<string> {
  const { CoreV1Api } = await import("@kubernetes/client-node");
  const core = kc.makeApiClient(CoreV1Api);
  const res = await core.createNamespacedServiceAccountToken({
    name: operatorName,
    namespace: defaultOperatorNamespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const token = res.status?.token;
  if (!token) throw new Error("the API server returned no ServiceAccount token");
  return token;
}

export async function getModel(
  client: KubeClient,
  namespace: string,
  name: string,
): Promise<MLModel | undefined> {
  return client.get<MLModel>(mlModelKind, { namespace, name });
}

/** Waits until the model's status matches, and returns it. */
export async function waitForPhase(
  client: KubeClient,
  namespace: string,
  name: string,
  phase: string,
  reason?: string,
  timeoutMs = 120_000,
): Promise<MLModel> {
  let last: MLModel | undefined;
  try {
    return await waitFor(
      `MLModel ${name} to reach ${phase}${reason ? `/${reason}` : ""}`,
      async () => {
        last = await getModel(client, namespace, name);
        const s = last?.status;
        return s?.phase === phase &&
          (!reason || s.reason === reason) &&
          s.observedGeneration === last?.metadata.generation
          ? last
          : undefined;
      },
      { timeoutMs },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last status: ${JSON.stringify(last?.status)}`);
  }
}

export async function eventsFor(
  client: KubeClient,
  namespace: string,
  name: string,
  kind?: string,
): Promise<{ type: string; reason: string; note: string }[]> {
  const list = await client.list<
    KubeObject & { type: string; reason: string; note: string; regarding: { name: string; kind?: string } }
  >(builtinKinds.Event, { namespace });
  return list.items
    .filter((e) => e.regarding?.name === name && (kind === undefined || e.regarding.kind === kind))
    .map((e) => ({ type: e.type, reason: e.reason, note: e.note }));
}

export async function podsOf(client: KubeClient, namespace: string, model: string) {
  return (
    await client.list<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(
      builtinKinds.Pod,
      {
        namespace,
        labelSelector: `serving.mlmodel.dev/model=${model},app.kubernetes.io/component=server`,
      },
    )
  ).items.filter((p) => !p.metadata.deletionTimestamp);
}

export function isReady(pod: { status?: { conditions?: { type: string; status: string }[] } }): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

/** Every object that still carries the model's label, by kind. */
export async function leftovers(client: KubeClient, namespace: string, model: string): Promise<string[]> {
  const selector = `serving.mlmodel.dev/model=${model}`;
  const out: string[] = [];
  for (const kind of [
    builtinKinds.Deployment,
    builtinKinds.ReplicaSet,
    builtinKinds.Pod,
    builtinKinds.Service,
    builtinKinds.Job,
    builtinKinds.PersistentVolumeClaim,
    builtinKinds.HorizontalPodAutoscaler,
  ]) {
    const items = (await client.list(kind, { namespace, labelSelector: selector })).items;
    for (const i of items) out.push(`${kind.kind}/${i.metadata.name}`);
  }
  return out;
}

/** What most e2e files start from. */
export interface OperatorTestBed {
  ns: TestNamespace;
  admin: KubeClient;
  operator: RunningOperator;
}

/** A namespace enforcing `restricted`, an admin client, and the operator (its own RBAC) watching the namespace. */
export async function operatorTestBed(
  namespacePrefix: string,
  options: OperatorOptions = {},
): Promise<OperatorTestBed> {
  const ns = await createNamespace(namespacePrefix, { podSecurity: "restricted" });
  const admin = await adminClient();
  return { ns, admin, operator: await startOperator(ns.name, options) };
}

/** Its tear-down, whatever part of the set-up was reached: the operator, the namespace, the volumes made for it. */
export async function removeTestBed(
  bed: Partial<OperatorTestBed>,
  volumes: readonly (string | undefined)[] = [],
): Promise<void> {
  await bed.operator?.stop();
  await bed.ns?.delete();
  for (const pv of volumes)
    if (pv) await bed.admin?.delete(builtinKinds.PersistentVolume, { name: pv }).catch(() => {});
}
