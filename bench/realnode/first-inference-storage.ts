/**
 * Time to first inference across storage modes (`npm run bench -- --series first-inference
 * --real-nodes 3 --replicas 1,3 --storage Claim,NodeCache --runs 2`): on one real-node cluster
 * of the bench's own with the node cache installed, the sample scikit-learn model is applied
 * with each replica count and each `spec.storage.mode`, the modes alternating from one group to
 * the next (first-inference-cases.ts), each
 *   cold  under a URI no node has fetched (its cache key is new; for Claim, a new claim), then
 *   warm  as a new MLModel with the same URI and sha256 once the cold one is deleted: the node
 *         cache still holds the version; a Claim model's claim went with it, so Claim fetches again
 * and timed from apply to the first correct prediction through its Service, with the split of
 * first-inference.ts, every replica Ready, the bytes the origin sent and the nodes the pods ran
 * on. Runs stop early when one more would overrun the budget of lock time (the machine's real
 * node is shared). Never passes or fails on time.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Pod, V1ServiceSpec } from "@kubernetes/client-node";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import {
  type ClusterState,
  ensureRealNodePrerequisites,
  reserveRealNode,
  up,
} from "../../src/cluster/index.ts";
import { ensureImage, ensureImagePrerequisites, imageNames, recipeFor } from "../../src/images/index.ts";
import {
  type SampleModel,
  type ServiceEndpoint,
  startModelFileServer,
} from "../../src/images/sample-model.ts";
import { install } from "../../src/install/install.ts";
import { defaultOperatorNamespace } from "../../src/install/manifests.ts";
import { installNodeCache } from "../../src/install/node-cache.ts";
import { builtinKinds, type KubeObject } from "../../src/runtime/index.ts";
import { adminClient, operatorTestBed } from "../../test/e2e/operator/helpers.ts";
import {
  applyCaSecret,
  publishSample,
  type RealNodeBed,
  removeRealNodeBed,
  sklearnModel,
} from "../../test/e2e/realnode/fixture.ts";
import { waitFor } from "../../test/harness/cluster.ts";
import { stopOwnRealNodes } from "../../test/harness/realnode.ts";
import { round } from "../lib/stats.ts";
import { type Log, seconds, timeFirstInference, unsupported } from "./first-inference.ts";
import {
  type BenchStorageMode,
  type CaseResult,
  casePlan,
  caseTable,
  type FirstInferenceCase,
  nextRunFits,
} from "./first-inference-cases.ts";

export interface StorageSeriesOptions {
  runs: number;
  realNodes: number;
  replicas: number[];
  storage: BenchStorageMode[];
  /** Lock time (from holding the machine's real node) after which no further run starts. */
  budgetMinutes: number;
  log: Log;
}

export interface StorageSeriesResult {
  skipped?: string;
  realNodes: number;
  replicas: number[];
  storage: BenchStorageMode[];
  runsAsked: number;
  runsDone: number;
  budgetMinutes: number;
  /** The sample model's archive, as the origin serves it. */
  modelBytes?: number;
  /** Images ready; the real node held -> the cluster up; the lock held in all. */
  imagesS?: number;
  nodeUpS?: number;
  lockHeldS?: number;
  cases: CaseResult[];
  /** Cases that never reached their first correct prediction, with why. */
  failures: (FirstInferenceCase & { error: string })[];
  /** 1-minute load average when the lock was taken, and at the end. */
  loadAtStart?: number;
  loadAverage: number[];
}

const load1 = () => round(loadavg()[0], 1)!;

export async function runStorageSeries(options: StorageSeriesOptions): Promise<StorageSeriesResult> {
  const { log } = options;
  const base = {
    realNodes: options.realNodes,
    replicas: options.replicas,
    storage: options.storage,
    runsAsked: options.runs,
    budgetMinutes: options.budgetMinutes,
  };
  const why = await unsupported();
  if (why) {
    log(`first-inference: skipped: ${why}`);
    return { ...base, skipped: why, runsDone: 0, cases: [], failures: [], loadAverage: loadavg() };
  }
  await ensureRealNodePrerequisites(log);
  await ensureImagePrerequisites(log);
  const imagesStarted = performance.now();
  const images: string[] = [];
  for (const name of imageNames) images.push((await ensureImage(name, (l) => log(`${name}: ${l}`))).archive);
  const imagesS = seconds(performance.now() - imagesStarted);
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-bench-first-inference-"));
  const progress = (line: string) => log(`[real-node] ${line}`);
  // The lock is waited for before `up`, so the lock time counts from holding it.
  await reserveRealNode(dir, { waitMs: 3 * 60 * 60_000, progress });
  const locked = performance.now();
  const loadAtStart = load1();
  const cases: CaseResult[] = [];
  const failures: (FirstInferenceCase & { error: string })[] = [];
  let runsDone = 0;
  let modelBytes: number | undefined;
  let nodeUpS: number | undefined;
  let bed: RealNodeBed | undefined;
  try {
    const state = await up({
      dir,
      ...(options.realNodes === 1 ? { realNode: true } : { realNodes: options.realNodes }),
      images,
      stopWhenGone: process.pid,
      progress,
    });
    nodeUpS = seconds(performance.now() - locked);
    bed = await storageBed(state, options);
    const sample = await publishSample(bed, "iris.tgz");
    modelBytes = sample.archive.length;
    const plan = casePlan(options.runs, options.replicas, options.storage);
    const runDurations: number[] = [];
    for (let run = 1; run <= options.runs; run++) {
      const used = performance.now() - locked;
      if (!nextRunFits(used, runDurations, options.budgetMinutes * 60_000)) {
        log(
          `run ${run} not started: ${seconds(used)} s of lock used, the longest run took ${seconds(Math.max(...runDurations))} s, the budget is ${options.budgetMinutes} min`,
        );
        break;
      }
      const runStarted = performance.now();
      for (const c of plan.filter((c) => c.run === run)) {
        try {
          const result = await oneCase(bed, sample, c);
          log(`${describeCase(c)}: ${JSON.stringify(result)}`);
          cases.push(result);
        } catch (err) {
          // One case that never answers is reported, and the others still run.
          const error = (err as Error).message;
          log(`${describeCase(c)}: failed: ${error}`);
          failures.push({ ...c, error });
          await deleteAndWait(bed, caseName(c)).catch((e: Error) => log(`cleaning up: ${e.message}`));
        }
      }
      runDurations.push(performance.now() - runStarted);
      runsDone = run;
    }
  } finally {
    if (bed) await removeRealNodeBed(bed);
    await stopOwnRealNodes(dir);
  }
  return {
    ...base,
    runsDone,
    ...(modelBytes !== undefined ? { modelBytes } : {}),
    imagesS,
    ...(nodeUpS !== undefined ? { nodeUpS } : {}),
    lockHeldS: seconds(performance.now() - locked),
    cases,
    failures,
    loadAtStart,
    loadAverage: loadavg(),
  };
}

/**
 * The operator (in this process, under its own RBAC) with the node cache installed before it
 * starts (it finds the agents' Service at start), the file server on the address pods reach
 * this machine at, and its CA as the models' credentials.
 */
async function storageBed(state: ClusterState, options: StorageSeriesOptions): Promise<RealNodeBed> {
  process.env.KUBECONFIG = state.kubeconfig;
  process.env.MLMODEL_TEST_CLUSTER_DIR = state.dir;
  const image = recipeFor("mlmodel").ref;
  const admin = await adminClient();
  await install(admin);
  const nodeCache = options.storage.includes("NodeCache");
  if (nodeCache) await installNodeCache(admin, { namespace: defaultOperatorNamespace, image, budget: "1Gi" });
  const operatorBed = await operatorTestBed("bench-ttfi", {
    downloaderImage: image,
    ...(nodeCache ? { nodeCacheNamespace: defaultOperatorNamespace } : {}),
  });
  const bed: Partial<RealNodeBed> = operatorBed;
  try {
    if (nodeCache) await agentsReady(operatorBed.admin, options.realNodes);
    const host = state.realNodes?.hostIp ?? state.realNode?.nodeIp;
    if (!host) throw new Error(`the cluster in ${state.dir} has no real node to reach this machine from`);
    const files = await startModelFileServer({ host });
    bed.files = files;
    bed.cluster = { dir: state.dir, kubeconfig: state.kubeconfig, state, nodeIp: host };
    await applyCaSecret(bed as RealNodeBed);
    return bed as RealNodeBed;
  } catch (err) {
    await removeRealNodeBed(bed);
    throw err;
  }
}

async function agentsReady(admin: RealNodeBed["admin"], nodes: number): Promise<void> {
  await waitFor(
    `a node cache agent Ready on each of the ${nodes} nodes`,
    async () => {
      const ds = await admin.get<KubeObject & { status?: { numberReady?: number } }>(builtinKinds.DaemonSet, {
        namespace: defaultOperatorNamespace,
        name: "mlmodel-node-cache",
      });
      return (ds?.status?.numberReady ?? 0) === nodes;
    },
    { timeoutMs: 300_000 },
  );
}

const describeCase = (c: FirstInferenceCase) =>
  `run ${c.run}, ${c.replicas} replica(s), ${c.storage}, ${c.cache}`;

/** A cold case's file is new; its warm case serves the same file (the same URI and sha256). */
const fileOf = (c: FirstInferenceCase) => `r${c.run}-x${c.replicas}-${c.storage.toLowerCase()}.tgz`;

const caseName = (c: FirstInferenceCase) => `r${c.run}-x${c.replicas}-${c.storage.toLowerCase()}-${c.cache}`;

/** Applies the case's model, times it, then deletes it and waits until its pods are gone. */
async function oneCase(bed: RealNodeBed, sample: SampleModel, c: FirstInferenceCase): Promise<CaseResult> {
  const file = fileOf(c);
  const uri = bed.files.add(file, sample.archive);
  const name = caseName(c);
  const entry = bed.cluster.state.realNodes?.nodes[0]?.nodeIp;
  const spec = sklearnModel(
    name,
    { uri, sha256: sample.sha256 },
    {
      replicas: c.replicas,
      storage: { size: "64Mi", mode: c.storage },
      // Several nodes: this machine reaches a Service at a node's NodePort, not at its ClusterIP.
      ...(entry ? { endpoint: { serviceType: "NodePort" } } : {}),
    },
  );
  // One archive for every case: the server publishes it under the name it was trained with.
  const model: MLModel = {
    ...spec,
    spec: { ...spec.spec, model: { ...spec.spec.model, name: sample.name } },
  };
  const bytesBefore = bed.files.bytesSent.get(`/${file}`) ?? 0;
  const startedAt = new Date().toISOString();
  const loadStart = load1();
  const timed = await timeFirstInference(
    bed,
    model,
    sample,
    c.replicas,
    entry ? (m) => nodePortEndpoint(bed, m, entry) : undefined,
  );
  const loadEnd = load1();
  const { endpoint: _, ...figures } = timed;
  await deleteAndWait(bed, name);
  return {
    ...c,
    ...figures,
    originBytes: (bed.files.bytesSent.get(`/${file}`) ?? 0) - bytesBefore,
    loadStart,
    loadEnd,
    startedAt,
  };
}

/**
 * The model's Service at its NodePort on `nodeIp`: kube-proxy there balances over the pods of
 * every node, as it does for a ClusterIP.
 */
async function nodePortEndpoint(bed: RealNodeBed, model: MLModel, nodeIp: string): Promise<ServiceEndpoint> {
  const url = new URL(model.status!.url!);
  const name = url.hostname.split(".")[0]!;
  const service = await bed.admin.get<KubeObject & { spec?: V1ServiceSpec }>(builtinKinds.Service, {
    namespace: bed.ns.name,
    name,
  });
  const port = Number(url.port || 80);
  const nodePort = service?.spec?.ports?.find((p) => p.port === port)?.nodePort;
  if (!nodePort)
    throw new Error(
      `Service ${bed.ns.name}/${name} has no NodePort for port ${port}: ${JSON.stringify(service?.spec?.ports)}`,
    );
  return { base: `http://${nodeIp}:${nodePort}`, host: `${nodeIp}:${nodePort}` };
}

/** Deletes the model and waits until none of its pods is left, so the next case starts alone. */
async function deleteAndWait(bed: RealNodeBed, name: string): Promise<void> {
  await bed.admin.delete(mlModelKind, { namespace: bed.ns.name, name });
  await waitFor(
    `the pods of ${name} to be gone`,
    async () => {
      const pods = await bed.admin.list(builtinKinds.Pod, {
        namespace: bed.ns.name,
        labelSelector: `serving.mlmodel.dev/model=${name}`,
      });
      return (pods.items as unknown as V1Pod[]).length === 0;
    },
    { timeoutMs: 300_000, intervalMs: 500 },
  );
}

export function storageSeriesSummary(result: StorageSeriesResult): string {
  if (result.skipped) return `first-inference: skipped: ${result.skipped}`;
  return [
    `first-inference across storage modes: ${result.realNodes} real node(s), ${result.runsDone} of ${result.runsAsked} runs (budget ${result.budgetMinutes} min of lock), model ${result.modelBytes} bytes; cluster up ${result.nodeUpS} s after taking the lock, lock held ${result.lockHeldS} s; load average (1 min) ${result.loadAtStart} at the start, ${result.loadAverage.map((l) => l.toFixed(1)).join(" ")} at the end`,
    ...caseTable(result.cases),
    ...result.failures.map((f) => `failed: ${describeCase(f)}: ${f.error}`),
  ].join("\n");
}

export function writeStorageSeriesResult(result: StorageSeriesResult, file: string): void {
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
}
