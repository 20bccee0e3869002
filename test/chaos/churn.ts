/**
 * Steady churn of MLModels (create, update, delete) from a seeded random source, the state the
 * driver last asked for, and the check that the cluster matches it: each model has exactly its
 * desired children, none are left for deleted models, status is current and truthful.
 *
 * The models are custom-image models (no download, no storage) so the only children are a
 * Deployment and a Service, and a changed spec shows up directly in the Deployment: an update
 * the operator missed is a Deployment whose replicas or image differ from the spec.
 */
import assert from "node:assert/strict";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import { fakeNode } from "../../src/cluster/bootstrap.ts";
import { install } from "../../src/install/install.ts";
import { builtinKinds, KubeClient, type KubeObject, type ResourceKind } from "../../src/runtime/index.ts";
import type { PrivateCluster } from "../harness/cluster.ts";

export const driverFieldManager = "chaos-driver";
const modelLabel = "serving.mlmodel.dev/model";

/** Mulberry32: small, seeded, good enough to make runs repeatable from their seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface ModelWish {
  replicas: number;
  version: number;
}

export function modelObject(namespace: string, name: string, wish: ModelWish): MLModel {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: { name, namespace },
    spec: {
      image: imageOf(wish),
      model: { path: "/models/chaos" },
      replicas: wish.replicas,
      endpoint: { protocol: "REST", restPort: 8080 },
    },
  } as MLModel;
}

export function imageOf(wish: ModelWish): string {
  return `registry.example.com/chaos/server:v${wish.version}`;
}

/** A private cluster made ready for the operator: install bundle, namespace, room for pods. */
export async function prepareCluster(
  cluster: PrivateCluster,
  namespace: string,
  podCapacity = 1500,
): Promise<KubeClient> {
  const admin = KubeClient.fromKubeConfig(cluster.kubeConfig());
  await install(admin);
  await admin.apply(
    builtinKinds.Namespace,
    {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: {
        name: namespace,
        labels: {
          "pod-security.kubernetes.io/enforce": "restricted",
          "pod-security.kubernetes.io/enforce-version": "latest",
        },
      },
    },
    { fieldManager: driverFieldManager, force: true },
  );
  // One kwok node holds 110 pods; the churn needs room for hundreds.
  const node = fakeNode(9);
  node.metadata!.name = "kwok-node-chaos";
  node.metadata!.labels!["kubernetes.io/hostname"] = "kwok-node-chaos";
  const capacity = { ...node.status!.capacity!, pods: String(podCapacity), cpu: "1000", memory: "4000Gi" };
  node.status = { capacity, allocatable: capacity };
  await admin.create(builtinKinds.Node, node as unknown as KubeObject);
  return admin;
}

export interface ChurnStats {
  creates: number;
  updates: number;
  deletes: number;
  errors: number;
}

/** The churn driver: what it asked for, per model, is the truth the checks compare against. */
export class Churn {
  readonly admin: KubeClient;
  readonly namespace: string;
  readonly wishes = new Map<string, ModelWish>();
  readonly deleted = new Set<string>();
  readonly stats: ChurnStats = { creates: 0, updates: 0, deletes: 0, errors: 0 };
  readonly #random: () => number;
  #next = 0;

  constructor(admin: KubeClient, namespace: string, seed: number) {
    this.admin = admin;
    this.namespace = namespace;
    this.#random = seededRandom(seed);
  }

  async create(): Promise<string> {
    const name = `m-${String(this.#next++).padStart(4, "0")}`;
    const wish = { replicas: 1 + Math.floor(this.#random() * 2), version: 1 };
    await this.#apply(name, wish);
    this.stats.creates++;
    return name;
  }

  /** Changes replicas (1 <-> 2) or the image version of a random live model. */
  async update(): Promise<string | undefined> {
    const name = this.#pick();
    if (!name) return undefined;
    const old = this.wishes.get(name)!;
    const wish =
      this.#random() < 0.5 ? { ...old, replicas: 3 - old.replicas } : { ...old, version: old.version + 1 };
    await this.#apply(name, wish);
    this.stats.updates++;
    return name;
  }

  async delete(): Promise<string | undefined> {
    const name = this.#pick();
    if (!name) return undefined;
    this.wishes.delete(name);
    this.deleted.add(name);
    await this.admin.delete(mlModelKind, { namespace: this.namespace, name });
    this.stats.deletes++;
    return name;
  }

  /** One random operation: mostly updates, some creates and deletes. */
  async step(weights = { create: 0.2, update: 0.65 }): Promise<void> {
    const r = this.#random();
    try {
      if (r < weights.create || this.wishes.size === 0) await this.create();
      else if (r < weights.create + weights.update) await this.update();
      else await this.delete();
    } catch {
      // The driver goes on through API outages; the check at the end tells what landed.
      this.stats.errors++;
    }
  }

  /**
   * Re-applies every wish and delete: after driver errors during an outage, the wanted state
   * is what was asked last, whether or not that request got through.
   */
  async settle(): Promise<void> {
    for (const [name, wish] of this.wishes) await this.#apply(name, wish);
    for (const name of this.deleted)
      await this.admin.delete(mlModelKind, { namespace: this.namespace, name });
  }

  #pick(): string | undefined {
    const names = [...this.wishes.keys()];
    return names.length ? names[Math.floor(this.#random() * names.length)] : undefined;
  }

  async #apply(name: string, wish: ModelWish): Promise<void> {
    this.wishes.set(name, wish);
    await this.admin.apply(mlModelKind, modelObject(this.namespace, name, wish), {
      fieldManager: driverFieldManager,
      force: true,
    });
  }
}

export interface ConvergenceReport {
  modelsChecked: number;
  /** Models whose status.observedGeneration is not their generation. */
  staleStatus: number;
  /** Models whose Deployment does not carry their last spec (replicas, image). */
  updatesMissed: number;
  /** Models with more than one Deployment or Service, or children of the wrong names. */
  duplicates: number;
  /** Children whose controlling MLModel no longer exists (or any object of a deleted model). */
  orphans: number;
  /** Models whose phase disagrees with their pods (Ready without ready pods, or the reverse). */
  phaseMismatches: number;
  /** Models missing from the cluster or present though deleted. */
  wrongModels: number;
  problems: string[];
}

type Child = KubeObject & {
  spec?: { replicas?: number; template?: { spec?: { containers?: { image?: string }[] } } };
};
type PodObj = KubeObject & {
  spec?: { containers?: { image?: string }[] };
  status?: { conditions?: { type: string; status: string }[] };
};

/** Kinds the operator creates; the last two are only checked for orphans (their number varies). */
const childKinds: ResourceKind[] = [
  builtinKinds.Deployment,
  builtinKinds.Service,
  builtinKinds.Job,
  builtinKinds.PersistentVolumeClaim,
  builtinKinds.HorizontalPodAutoscaler,
  builtinKinds.PodDisruptionBudget,
  builtinKinds.ControllerRevision,
];
const orphanOnly = new Set(["PodDisruptionBudget", "ControllerRevision"]);

function isPodReady(pod: PodObj): boolean {
  return pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
}

async function listAll<T extends KubeObject>(client: KubeClient, kind: ResourceKind, namespace: string) {
  const items: T[] = [];
  let cont: string | undefined;
  do {
    const page = await client.list<T>(kind, { namespace, limit: 500, ...(cont ? { continue: cont } : {}) });
    items.push(...page.items);
    cont = page.continue;
  } while (cont);
  return items;
}

/**
 * Compares the cluster with the churn's wishes. Pure reads; every count is 0 once the operator
 * (and the cluster's garbage collector, for deleted models) has converged.
 */
export async function checkConvergence(
  client: KubeClient,
  namespace: string,
  wishes: ReadonlyMap<string, ModelWish>,
): Promise<ConvergenceReport> {
  const report: ConvergenceReport = {
    modelsChecked: 0,
    staleStatus: 0,
    updatesMissed: 0,
    duplicates: 0,
    orphans: 0,
    phaseMismatches: 0,
    wrongModels: 0,
    problems: [],
  };
  const problem = (field: Exclude<keyof ConvergenceReport, "problems">, text: string) => {
    report[field]++;
    if (report.problems.length < 20) report.problems.push(text);
  };
  const models = await listAll<MLModel>(client, mlModelKind, namespace);
  const byName = new Map(models.map((m) => [m.metadata.name!, m]));
  const uids = new Set(models.map((m) => m.metadata.uid));
  const children = new Map<string, Child[]>();
  for (const kind of childKinds) {
    for (const obj of await listAll<Child>(client, kind, namespace)) {
      if (obj.metadata.deletionTimestamp) continue;
      const owner = obj.metadata.ownerReferences?.find((o) => o.controller);
      const modelName = obj.metadata.labels?.[modelLabel];
      if (!owner || !uids.has(owner.uid) || (modelName && !wishes.has(modelName))) {
        problem("orphans", `${kind.kind}/${obj.metadata.name} has no live owner`);
        continue;
      }
      if (orphanOnly.has(kind.kind)) continue;
      const list = children.get(modelName ?? "") ?? [];
      list.push({ ...obj, kind: kind.kind });
      children.set(modelName ?? "", list);
    }
  }
  const pods = (await listAll<PodObj>(client, builtinKinds.Pod, namespace)).filter(
    (p) => !p.metadata.deletionTimestamp && p.metadata.labels?.["app.kubernetes.io/component"] === "server",
  );
  for (const m of models) {
    if (!wishes.has(m.metadata.name!) && !m.metadata.deletionTimestamp)
      problem("wrongModels", `${m.metadata.name} exists but was deleted`);
  }
  for (const [name, wish] of wishes) {
    report.modelsChecked++;
    const m = byName.get(name);
    if (!m) {
      problem("wrongModels", `${name} is missing`);
      continue;
    }
    if (m.status?.observedGeneration !== m.metadata.generation)
      problem(
        "staleStatus",
        `${name}: observedGeneration ${m.status?.observedGeneration} != ${m.metadata.generation}`,
      );
    const mine = children.get(name) ?? [];
    const deployments = mine.filter((c) => c.kind === "Deployment");
    const services = mine.filter((c) => c.kind === "Service");
    const others = mine.filter((c) => c.kind !== "Deployment" && c.kind !== "Service");
    if (
      deployments.length !== 1 ||
      services.length !== 1 ||
      others.length > 0 ||
      deployments[0]?.metadata.name !== name
    ) {
      problem(
        "duplicates",
        `${name}: children ${mine.map((c) => `${c.kind}/${c.metadata.name}`).join(", ")}`,
      );
    }
    const d = deployments[0];
    const image = d?.spec?.template?.spec?.containers?.[0]?.image;
    if (d && (d.spec?.replicas !== wish.replicas || image !== imageOf(wish)))
      problem(
        "updatesMissed",
        `${name}: Deployment has ${d.spec?.replicas}x ${image}, wanted ${wish.replicas}x ${imageOf(wish)}`,
      );
    const current = pods.filter(
      (p) => p.metadata.labels?.[modelLabel] === name && p.spec?.containers?.[0]?.image === imageOf(wish),
    );
    const readyPods = current.filter(isPodReady).length;
    const reallyReady = readyPods >= wish.replicas;
    if ((m.status?.phase === "Ready") !== reallyReady)
      problem(
        "phaseMismatches",
        `${name}: phase ${m.status?.phase} with ${readyPods}/${wish.replicas} ready pods of the current image`,
      );
  }
  return report;
}

export function converged(r: ConvergenceReport): boolean {
  return r.staleStatus + r.updatesMissed + r.duplicates + r.orphans + r.phaseMismatches + r.wrongModels === 0;
}

/** Polls the check until everything matches or `timeoutMs` passes; returns the last report. */
export async function waitConverged(
  client: KubeClient,
  namespace: string,
  wishes: ReadonlyMap<string, ModelWish>,
  timeoutMs = 300_000,
): Promise<{ report: ConvergenceReport; waitedMs: number }> {
  const start = Date.now();
  for (;;) {
    const report = await checkConvergence(client, namespace, wishes).catch((err: Error) => ({
      ...emptyFailure(),
      problems: [`check failed: ${err.message}`],
    }));
    if (converged(report) || Date.now() - start > timeoutMs) return { report, waitedMs: Date.now() - start };
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function emptyFailure(): ConvergenceReport {
  return {
    modelsChecked: 0,
    staleStatus: 0,
    updatesMissed: 0,
    duplicates: 0,
    orphans: 0,
    phaseMismatches: 0,
    wrongModels: 1,
    problems: [],
  };
}

/** Every count that must be 0 once the operator converged, with the first problems on failure. */
export function assertConverged(report: ConvergenceReport): void {
  const { problems, modelsChecked, ...counts } = report;
  assert.deepEqual(
    counts,
    { staleStatus: 0, updatesMissed: 0, duplicates: 0, orphans: 0, phaseMismatches: 0, wrongModels: 0 },
    problems.join("\n"),
  );
  assert.ok(modelsChecked > 0, "no model was checked");
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
