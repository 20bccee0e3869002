/**
 * `npm run bench`: the operator benchmark against a real control plane (a private local one
 * started for the run, or the cluster of --kubeconfig / KUBECONFIG). Prints figures and writes
 * JSON and SVG plots under bench/results/; never passes or fails on time.
 *
 *   npm run bench                                  # N=100, every series, image path
 *   npm run bench -- --path both --models 300      # image path, then download path
 *   npm run bench -- --path nodecache --models 500 --replicas 3 --nodes 10   # storage.mode NodeCache
 *   npm run bench -- --models 1000 --json          # last line: one JSON object
 *   npm run bench -- --models 1000 --series converge,floor --memory 1000,10000
 *   npm run bench -- --models 1000 --series converge,floor --pairs 4 --memory ""   # the ratio as a median of 4
 *   npm run bench -- --series first-inference --runs 3   # real pods: apply -> first prediction (bench/realnode)
 *   npm run bench -- --series first-inference --real-nodes 3 --replicas 1,3 --storage Claim,NodeCache --runs 2
 */
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { benchCluster } from "../bench/lib/cluster.ts";
import { round } from "../bench/lib/stats.ts";
import {
  allPaths,
  allSeries,
  type BenchPath,
  downloads,
  knownPaths,
  type OperatorBenchResult,
  type PairFigures,
  pairFigures,
  runOperatorBench,
  type SeriesName,
  withPairs,
} from "../bench/operator/bench.ts";
import { jsonLine, summary, writeResults } from "../bench/operator/report.ts";
import {
  firstInferenceSummary,
  runFirstInferenceBench,
  writeFirstInferenceResult,
} from "../bench/realnode/first-inference.ts";
import { parseStorageModes } from "../bench/realnode/first-inference-cases.ts";
import {
  runStorageSeries,
  storageSeriesSummary,
  writeStorageSeriesResult,
} from "../bench/realnode/first-inference-storage.ts";
import { defaultConcurrency } from "../src/operator/mlmodel/controller.ts";

const help = `Usage: npm run bench -- [flags]

  --models N          MLModels to create at once (default 100)
  --path PATH         image (Deployment + Service), download (PVC, download Job, then Deployment
                      + Service; volumes made by the bench beforehand), both (image, then
                      download), or nodecache (storage.mode NodeCache: no claim, a download Job,
                      serving pods filled by a cache-copy init container; the operator is given a
                      node cache URL nothing answers; no floor), or a comma-separated list run one
                      after the other on the same cluster, e.g. download,nodecache (default image)
  --replicas N        spec.replicas of every model (default 1); for first-inference with --storage,
                      a comma-separated list, e.g. 1,3
  --nodes N           exactly N fake nodes in the private control plane, each taking its share
                      of the pods (default: as many 110-pod nodes as the pods need, and one more)
  --json              print one JSON object as the last line
  --kubeconfig PATH   use this cluster (default: $KUBECONFIG if set, else a private local control plane)
  --series LIST       comma-separated: ${allSeries.join(",")} (default: all), or first-inference
                      (real pods on a real-node cluster of its own: apply -> first prediction, and
                      traffic during an update and a rollback; opt-in, Linux and root)
  --pairs N           converge + floor N times on the same cluster, the order alternated (operator
                      first, then floor first, ...); the ratio is the pairs' median (default 1)
  --runs N            first-inference runs (default 3)
  --storage LIST      first-inference across storage modes: Claim, NodeCache or both
                      (Claim,NodeCache), each cold and warm for each --replicas, the modes
                      alternating, on a cluster with the node cache installed (no update traffic)
  --real-nodes N      real nodes of the first-inference cluster with --storage (default 1)
  --budget-minutes M  with --storage: no further run starts once it would hold the machine's
                      real node longer than this (default 22)
  --concurrency N     operator --concurrency and the floor client's (default ${defaultConcurrency}, the operator's default)
  --idle SECONDS      steady-state idle period (default 60)
  --memory LIST       cached-model counts for the memory series (default 1000,10000; "" to skip)
  --parallel N        creates/deletes in flight from the benchmark client (default 32)
  --node-flags=FLAGS  extra Node flags for the operator process, e.g. --node-flags="--cpu-prof --cpu-prof-dir=DIR"
                      (a profile is written when the operator exits; profiling slows it down)`;

function parse() {
  const { values } = parseArgs({
    options: {
      models: { type: "string", default: "100" },
      path: { type: "string", default: "image" },
      replicas: { type: "string" },
      nodes: { type: "string" },
      json: { type: "boolean", default: false },
      kubeconfig: { type: "string" },
      series: { type: "string", default: allSeries.join(",") },
      runs: { type: "string", default: "3" },
      storage: { type: "string" },
      "real-nodes": { type: "string" },
      "budget-minutes": { type: "string", default: "22" },
      pairs: { type: "string", default: "1" },
      concurrency: { type: "string", default: String(defaultConcurrency) },
      idle: { type: "string", default: "60" },
      memory: { type: "string", default: "1000,10000" },
      parallel: { type: "string", default: "32" },
      "node-flags": { type: "string", default: "" },
      help: { type: "boolean", short: "h" },
    },
  });
  return values;
}

const firstInference = "first-inference";

function positive(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} "${value}" must be a whole number >= 1`);
  return n;
}

async function main(): Promise<number> {
  const flags = parse();
  if (flags.help) {
    console.log(help);
    return 0;
  }
  const asked = new Set(flags.series.split(",").filter(Boolean));
  const series = new Set([...asked].filter((s) => s !== firstInference) as SeriesName[]);
  for (const s of series)
    if (!allSeries.includes(s))
      throw new Error(`--series: unknown "${s}"; known: ${[...allSeries, firstInference].join(", ")}`);
  const models = positive("models", flags.models);
  const paths: BenchPath[] = flags.path === "both" ? allPaths : (flags.path.split(",") as BenchPath[]);
  for (const path of paths)
    if (!knownPaths.includes(path))
      throw new Error(
        `--path "${flags.path}": "${path}" is not a path; give image, download, nodecache, a comma-separated list of them, or both`,
      );
  // A list of replica counts is first-inference's; the operator's series take one.
  const replicas = series.size > 0 ? positive("replicas", flags.replicas ?? "1") : 1;
  const pairCount = positive("pairs", flags.pairs);
  if (pairCount > 1 && paths.includes("nodecache"))
    throw new Error(
      `--pairs ${pairCount} pairs converge with the floor, which the nodecache path has none of; compare it with --path download,nodecache instead`,
    );
  if (pairCount > 1 && !(series.has("converge") && series.has("floor")))
    throw new Error(
      `--pairs ${pairCount} needs the converge and floor series (--series ${[...series].join(",")})`,
    );
  const memoryPoints = flags.memory
    .split(",")
    .filter(Boolean)
    .map((v) => positive("memory", v));
  const log = (line: string) => console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}`);
  if (asked.has(firstInference) && flags.storage !== undefined) {
    const result = await runStorageSeries({
      runs: positive("runs", flags.runs),
      realNodes: positive("real-nodes", flags["real-nodes"] ?? "1"),
      replicas: (flags.replicas ?? "1").split(",").map((r) => positive("replicas", r)),
      storage: parseStorageModes(flags.storage),
      budgetMinutes: positive("budget-minutes", flags["budget-minutes"]),
      log,
    });
    if (!result.skipped) {
      const file = join(
        import.meta.dirname,
        "..",
        "bench",
        "results",
        `first-inference-storage-n${result.realNodes}.json`,
      );
      writeStorageSeriesResult(result, file);
      log(`wrote ${file}`);
    }
    console.log(storageSeriesSummary(result));
    if (series.size === 0) return 0;
  } else if (asked.has(firstInference)) {
    for (const flag of ["real-nodes", "replicas"] as const)
      if (flags[flag] !== undefined)
        throw new Error(
          `--${flag} "${flags[flag]}" applies to first-inference only with --storage (e.g. --storage Claim,NodeCache); without it the series runs 1 replica on 1 real node`,
        );
    const result = await runFirstInferenceBench({ runs: positive("runs", flags.runs), log });
    if (!result.skipped) {
      const file = join(import.meta.dirname, "..", "bench", "results", "first-inference.json");
      writeFirstInferenceResult(result, file);
      log(`wrote ${file}`);
    }
    console.log(firstInferenceSummary(result));
    if (series.size === 0) return 0;
  }
  const cluster = await benchCluster({
    kubeconfig: flags.kubeconfig ?? process.env.KUBECONFIG,
    // Floor and operator pods never coexist (the floor namespace is emptied first); a download
    // model also has its download pod, done but not deleted until its content is replaced.
    pods: models * replicas + (paths.some(downloads) ? models : 0),
    ...(flags.nodes !== undefined ? { nodes: positive("nodes", flags.nodes) } : {}),
    log,
  });
  // Ctrl-C still stops the private control plane (and, through process exit, the operator).
  for (const signal of ["SIGINT", "SIGTERM"] as const)
    process.once(signal, () => {
      log(`${signal}: stopping the cluster`);
      void cluster.stop().finally(() => process.exit(130));
    });
  try {
    const lines: string[] = [];
    for (const [i, path] of paths.entries()) {
      // The memory series does not depend on the path: measured once.
      const pathSeries = new Set([...series].filter((s) => s !== "memory" || i === 0));
      const options = {
        models,
        path,
        concurrency: positive("concurrency", flags.concurrency),
        idleSeconds: positive("idle", flags.idle),
        memoryPoints,
        series: pathSeries,
        clientParallelism: positive("parallel", flags.parallel),
        replicas,
        nodeFlags: flags["node-flags"].split(/\s+/).filter(Boolean),
        log,
      };
      const pairs: PairFigures[] = [];
      const runPair = async (p: number): Promise<OperatorBenchResult> => {
        const loadAtStart = round(loadavg()[0], 1)!;
        // The first run has every series asked for; the next ones converge and floor alone.
        const run = await runOperatorBench(cluster, {
          ...options,
          ...(p > 0 ? { series: new Set<SeriesName>(["converge", "floor"]), memoryPoints: [] } : {}),
          // The next pair waits for this one's namespaces first (earlierSeriesGone).
          floorFirst: p % 2 === 1,
        });
        const pair = pairFigures(run, loadAtStart);
        if (pair) pairs.push(pair);
        if (pairCount > 1) log(`pair ${p + 1} of ${pairCount}: ${JSON.stringify(pair)}`);
        return run;
      };
      // The first run is the result (--pairs is at least 1); the next ones add their pairs.
      let result = await runPair(0);
      for (let p = 1; p < pairCount; p++) await runPair(p);
      if (pairCount > 1) result = withPairs(result, pairs);
      for (const f of writeResults(result)) log(`wrote ${f}`);
      console.log(summary(result));
      lines.push(jsonLine(result));
    }
    if (flags.json)
      console.log(lines.length === 1 ? lines[0] : `{"models":${models},"paths":[${lines.join(",")}]}`);
  } finally {
    await cluster.stop();
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : err);
    process.exit(1);
  },
);
