/**
 * The floor: no operator. A bare client creates the same MLModels and writes the very children
 * the operator would (built by the operator's own desired-state functions), in the operator's
 * order, with the operator's concurrency, then waits for every Deployment's pod to be ready.
 * The control plane's own limit on this machine, for the same objects.
 *
 *   image path:    Deployment + Service (in parallel, as the operator applies them)
 *   download path: PVC, then ServiceAccount + Role, RoleBinding, download Job; once the Job is
 *                  Complete (kwok completes its pod), Deployment + Service
 */
import type { V1Job } from "@kubernetes/client-node";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import {
  desiredDeployment,
  desiredDownloadIdentity,
  desiredDownloadJob,
  desiredService,
  desiredStorage,
} from "../../src/operator/desired.ts";
import { withAppliedHash } from "../../src/operator/drift.ts";
import { fieldManager, labels } from "../../src/operator/names.ts";
import { defaultOperatorConfig, planModel, type ServingPlan } from "../../src/operator/plan.ts";
import { resolveRuntime } from "../../src/operator/runtime-selection.ts";
import {
  builtinKinds,
  controllerOwnerRef,
  Informer,
  type KubeClient,
  type KubeObject,
  type ResourceKind,
} from "../../src/runtime/index.ts";
import { inParallel, type Percentiles, percentiles, round } from "../lib/stats.ts";
import { Tracker } from "./tracker.ts";

/**
 * image and download as above; nodecache: the download path with `storage.mode: NodeCache` (no
 * claim; the floor is not built for it: compare it with the download path, operator to operator).
 */
export type BenchPath = "image" | "download" | "nodecache";

export interface FloorResult {
  seconds: number;
  latency: Percentiles;
  latencies: number[];
}

export interface FloorOptions {
  concurrency: number;
  clientParallelism: number;
  path: BenchPath;
  /** A liveness bound for the whole run, not a measurement. */
  timeoutMs: number;
}

/** Tasks run by a fixed number of workers, in the order pushed, until closed and empty. */
export class TaskPool {
  readonly #tasks: (() => Promise<void>)[] = [];
  readonly #idle: (() => void)[] = [];
  #closed = false;

  push(task: () => Promise<void>): void {
    this.#tasks.push(task);
    this.#idle.shift()?.();
  }

  close(): void {
    this.#closed = true;
    for (const wake of this.#idle.splice(0)) wake();
  }

  run(workers: number): Promise<void> {
    const worker = async () => {
      for (;;) {
        while (this.#tasks.length === 0 && !this.#closed) await new Promise<void>((r) => this.#idle.push(r));
        const task = this.#tasks.shift();
        if (!task) return;
        await task();
      }
    };
    return Promise.all(Array.from({ length: workers }, worker)).then(() => {});
  }
}

function planOf(model: MLModel): ServingPlan {
  const resolution = resolveRuntime(model, [], []);
  if (!resolution.ok) throw new Error(`bench model has no runtime: ${resolution.message}`);
  return planModel(model, resolution.runtime);
}

function apply(admin: KubeClient, kind: ResourceKind, obj: object, force = true): Promise<unknown> {
  return admin.apply(kind, obj as KubeObject, { fieldManager, force });
}

/** With the applied-hash annotation, as the operator's applyIfChanged writes its children. */
function hashed(obj: object): KubeObject {
  return withAppliedHash(obj as KubeObject);
}

/** What the operator writes for a model that serves: its Deployment and Service, together. */
export async function applyServing(admin: KubeClient, model: MLModel): Promise<void> {
  const plan = planOf(model);
  const owner = controllerOwnerRef(model);
  await Promise.all([
    apply(admin, builtinKinds.Deployment, hashed(desiredDeployment(plan, owner))),
    apply(admin, builtinKinds.Service, hashed(desiredService(plan, owner))),
  ]);
}

/**
 * What the operator writes before a download: the claim, the Job's identity (ServiceAccount and
 * Role together, then the RoleBinding; applied without force, as the operator does) and the Job.
 */
export async function applyDownload(admin: KubeClient, model: MLModel): Promise<void> {
  const plan = planOf(model);
  const owner = controllerOwnerRef(model);
  const storage = desiredStorage(plan, owner);
  const identity = desiredDownloadIdentity(plan, owner);
  const job = desiredDownloadJob(plan, owner, defaultOperatorConfig);
  if (!storage || !identity || !job) throw new Error(`bench model ${plan.name} downloads nothing`);
  await apply(admin, builtinKinds.PersistentVolumeClaim, hashed(storage));
  const [account, role, binding] = identity;
  await Promise.all([
    apply(admin, builtinKinds.ServiceAccount, account, false),
    apply(admin, builtinKinds.Role, role, false),
  ]);
  await apply(admin, builtinKinds.RoleBinding, binding, false);
  await apply(admin, builtinKinds.Job, job);
}

function complete(job: Readonly<V1Job>): boolean {
  return Boolean(job.status?.conditions?.some((c) => c.type === "Complete" && c.status === "True"));
}

export async function floor(
  admin: KubeClient,
  namespace: string,
  models: MLModel[],
  opts: FloorOptions,
): Promise<FloorResult> {
  const deployments = new Tracker<
    KubeObject & {
      spec?: { replicas?: number };
      status?: { readyReplicas?: number; updatedReplicas?: number };
    }
  >(admin, builtinKinds.Deployment, namespace);
  const jobs = new Informer<V1Job & KubeObject>(admin, builtinKinds.Job, { scope: { namespace } });
  const stopJobs = new AbortController();
  await deployments.start();
  try {
    const names = models.map((m) => m.metadata.name!);
    const t0 = performance.now();
    const ready = deployments.until(
      names,
      (d) => {
        const want = d.spec?.replicas ?? 1;
        return (d.status?.readyReplicas ?? 0) >= want && (d.status?.updatedReplicas ?? 0) >= want;
      },
      opts.timeoutMs,
    );
    const pool = new TaskPool();
    const created = new Map<string, MLModel>();
    let served = 0;
    const serve = (m: MLModel) =>
      pool.push(async () => {
        await applyServing(admin, m);
        if (++served === models.length) pool.close();
      });
    if (opts.path === "download") {
      // The operator reacts to its Job's completion; so does the floor, through a watch.
      const queued = new Set<string>();
      jobs.addHandler((change) => {
        const model = change.object.metadata.labels?.[labels.model];
        const m = model ? created.get(model) : undefined;
        if (change.type === "delete" || !m || queued.has(model!) || !complete(change.object)) return;
        queued.add(model!);
        serve(m);
      });
      void jobs.run(stopJobs.signal);
      await jobs.waitForSync(stopJobs.signal);
    }
    const started = new Map<string, number>();
    const workers = pool.run(opts.concurrency);
    workers.catch(() => {}); // awaited below; a failed apply must not be an unhandled rejection first
    await inParallel(models, opts.clientParallelism, async (m) => {
      started.set(m.metadata.name!, performance.now());
      const made = await admin.create(mlModelKind, m);
      created.set(made.metadata.name!, made);
      if (opts.path === "download") pool.push(() => applyDownload(admin, made));
      else serve(made);
    });
    await workers;
    const reached = await ready;
    const latencies = [...reached].map(([name, t]) => (t - started.get(name)!) / 1000);
    return {
      seconds: round((Math.max(...reached.values()) - t0) / 1000)!,
      latency: percentiles(latencies),
      latencies,
    };
  } finally {
    stopJobs.abort();
    deployments.stop();
  }
}
