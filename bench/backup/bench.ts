/**
 * What `mlmodel backup` and `mlmodel restore` cost at scale, on kwok: N image-path models, each
 * with 3 revisions recorded by the operator (running as its own process, as the image runs
 * it); `mlmodel backup -n NS -o FILE` timed as a user runs it (a CLI process); the namespace
 * deleted (the cluster then holds none of the models); `mlmodel restore FILE` timed the same
 * way while the operator runs, then the time until every model is Ready on its backed-up
 * revision, and how many models' histories match the backup's numbers. Prints figures with
 * the load average (and one JSON line with --json); never passes or fails on time.
 *
 *   node bench/backup/bench.ts                     # N = 100, a private local control plane
 *   node bench/backup/bench.ts --models 1000 --json
 *   node bench/backup/bench.ts --models 1000 --kubeconfig K
 */
import { execFile } from "node:child_process";
import { mkdtempSync, statSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import { labels } from "../../src/operator/names.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../src/runtime/index.ts";
import { benchCluster } from "../lib/cluster.ts";
import { round } from "../lib/stats.ts";
import { benchModel, modelNames } from "../operator/bench.ts";
import { TaskPool } from "../operator/floor.ts";
import { operatorKubeconfig, startOperatorProcess } from "../operator/process.ts";
import { resultsDir } from "../operator/report.ts";

const { values: flags } = parseArgs({
  options: {
    models: { type: "string", default: "100" },
    kubeconfig: { type: "string" },
    parallel: { type: "string", default: "32" },
    json: { type: "boolean", default: false },
  },
});

const n = Number(flags.models);
const parallel = Number(flags.parallel);
const namespace = "bench-backup";
const cli = join(import.meta.dirname, "..", "..", "src", "cli", "main.ts");
const run = promisify(execFile);
const log = (line: string) => process.stderr.write(`[bench backup] ${line}\n`);
const load = () => round(loadavg()[0], 2)!;
const seconds = (ms: number) => round(ms / 1000, 2)!;

/** Lists every model of the namespace, page by page. */
async function models(admin: KubeClient): Promise<MLModel[]> {
  const out: MLModel[] = [];
  let next: string | undefined;
  do {
    const page = await admin.list<MLModel>(mlModelKind, {
      namespace,
      limit: 500,
      ...(next ? { continue: next } : {}),
    });
    out.push(...page.items);
    next = page.continue || undefined;
  } while (next);
  return out;
}

/** Polls until `done` holds for all N models; returns the seconds it took. */
async function until(admin: KubeClient, what: string, done: (m: MLModel) => boolean): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const all = await models(admin);
    const ok = all.filter(done).length;
    if (all.length === n && ok === n) return seconds(performance.now() - t0);
    await new Promise((r) => setTimeout(r, 2000));
    if (performance.now() - t0 > 30 * 60_000) throw new Error(`${what}: ${ok} of ${n} after 30 min`);
  }
}

/**
 * Ready on revision `number`, or settled on the last ready one after the operator rolled back
 * automatically (a surge pod that cannot be scheduled in time fails a rollout): a state a
 * backup must carry too (status.revision.failed).
 */
const readyOnNumber = (number: number) => (m: MLModel) =>
  m.status?.phase === "Ready" &&
  m.status.observedGeneration === m.metadata.generation &&
  ((m.status.revision?.currentNumber === number &&
    m.status.revision.lastReady === m.status.revision.current) ||
    m.status.reason === "RolledBack");

async function inPool(names: readonly string[], work: (name: string) => Promise<unknown>): Promise<void> {
  const pool = new TaskPool();
  for (const name of names) pool.push(async () => void (await work(name)));
  pool.close();
  await pool.run(parallel);
}

/** Every model's revisions as "hash:number", sorted: what must be the same after a restore. */
async function histories(admin: KubeClient): Promise<Map<string, string>> {
  const byModel = new Map<string, string[]>();
  let next: string | undefined;
  do {
    const page = await admin.list<KubeObject>(builtinKinds.ControllerRevision, {
      namespace,
      labelSelector: `${labels.component}=revision`,
      limit: 500,
      ...(next ? { continue: next } : {}),
    });
    for (const r of page.items as unknown as V1ControllerRevision[]) {
      const model = r.metadata?.labels?.[labels.model] ?? "";
      byModel.set(model, [
        ...(byModel.get(model) ?? []),
        `${r.metadata?.labels?.[labels.revision]}:${r.revision}`,
      ]);
    }
    next = page.continue || undefined;
  } while (next);
  return new Map([...byModel].map(([k, v]) => [k, v.sort().join(",")]));
}

async function main(): Promise<void> {
  // Room for a surge pod per model: each update rolls every model at once.
  const cluster = await benchCluster({
    ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}),
    pods: 2 * n,
    log,
  });
  const work = mkdtempSync(join(tmpdir(), "mlmodel-bench-backup-"));
  const admin = cluster.admin;
  try {
    const kubeconfig = await operatorKubeconfig(admin, cluster.kubeConfig, work);
    await admin.create(builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: namespace },
    });
    const operator = await startOperatorProcess({
      kubeconfig,
      namespace,
      concurrency: 8,
      logFile: join(work, "operator.log"),
    });
    const names = modelNames(n);
    const setupLoad = load();
    log(`${n} models, 3 revisions each (load ${setupLoad})`);
    await inPool(names, (name) => admin.create(mlModelKind, benchModel(name, namespace, "backup")));
    log(
      `revision 1 on every model in ${await until(admin, "revision 1", readyOnNumber(1))} s (load ${load()})`,
    );
    for (const tag of [2, 3]) {
      await inPool(names, (name) =>
        admin.patch(
          mlModelKind,
          { namespace, name },
          { spec: { image: `registry.example.com/bench/model:${tag}` } },
          "merge",
        ),
      );
      const took = await until(admin, `revision ${tag}`, readyOnNumber(tag));
      log(`revision ${tag} on every model in ${took} s (load ${load()})`);
    }
    const before = await histories(admin);

    const file = join(work, "backup.yaml");
    const backupLoad = load();
    let t0 = performance.now();
    await run(process.execPath, [
      cli,
      "backup",
      "-n",
      namespace,
      "-o",
      file,
      "--kubeconfig",
      cluster.kubeconfigPath,
    ]);
    const backupSeconds = seconds(performance.now() - t0);
    const fileMiB = round(statSync(file).size / 2 ** 20, 2)!;
    log(`backup: ${backupSeconds} s, ${fileMiB} MiB (load ${backupLoad})`);

    await admin.delete(builtinKinds.Namespace, { name: namespace });
    for (;;) {
      if (!(await admin.get(builtinKinds.Namespace, { name: namespace }))) break;
      await new Promise((r) => setTimeout(r, 2000));
    }
    log("namespace deleted; restoring with the operator running");

    const restoreLoad = load();
    t0 = performance.now();
    const restored = await run(process.execPath, [
      cli,
      "restore",
      file,
      "--kubeconfig",
      cluster.kubeconfigPath,
    ]);
    const restoreSeconds = seconds(performance.now() - t0);
    const readySeconds = round(
      restoreSeconds + (await until(admin, "restored and Ready", readyOnNumber(3))),
      2,
    )!;
    const after = await histories(admin);
    const matching = [...before].filter(([model, h]) => after.get(model) === h).length;
    const endLoad = load();
    await operator.stop();
    const result = {
      models: n,
      revisions: 3 * n,
      backupSeconds,
      fileMiB,
      restoreSeconds,
      restoreToAllReadySeconds: readySeconds,
      historiesMatching: matching,
      restoreOutput: restored.stdout.trim(),
      load: { setup: setupLoad, backup: backupLoad, restore: restoreLoad, end: endLoad },
      cluster: cluster.description,
      at: new Date().toISOString(),
    };
    log(`restore: ${restoreSeconds} s (${restored.stdout.trim()})`);
    log(
      `restore -> every model Ready on revision 3: ${readySeconds} s; histories matching the backup: ${matching} of ${n}`,
    );
    log(
      `load average: ${setupLoad} at setup, ${backupLoad} at backup, ${restoreLoad} at restore, ${endLoad} at the end`,
    );
    writeFileSync(join(resultsDir, `backup-n${n}.json`), `${JSON.stringify(result, null, 2)}\n`);
    if (flags.json) console.log(JSON.stringify(result));
  } finally {
    await cluster.stop();
  }
}

await main();
