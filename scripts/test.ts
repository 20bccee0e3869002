/**
 * `npm test`: type check, lint, install what the selected test files need, then every test file
 * in one `node --test` run. When any integration or e2e test is selected, a real local control
 * plane is started first (or the cluster in MLMODEL_TEST_KUBECONFIG is used) and torn down at the
 * end, even on failure.
 *
 *   node scripts/test.ts                 everything
 *   node scripts/test.ts --unit          unit tests only (no cluster)
 *   node scripts/test.ts --only PATH...  just these files or directories (no type check, no lint)
 *   node scripts/test.ts --keep-cluster  leave the cluster running afterwards (prints its dir)
 *
 * Prerequisites (test/harness/prerequisites): the control plane's binaries, Helm, the
 * downloader's test servers, openssl, a real node's packages and binaries, the images. Each test
 * file's needs come from its directory and its `// test-needs:` line; the missing ones are
 * installed into caches outside the repo first, with progress. A failed install stops the run
 * naming what failed and how to install it by hand; a prerequisite unavailable on this machine
 * turns the files that need it into skipped tests, unless MLMODEL_TEST_REQUIRE names it (CI):
 * then they are failures.
 *
 * Real pods: when a selected file needs `real-node`, ONE real-node cluster is started for the run
 * beside the shared kwok cluster, with the built images imported (MLMODEL_TEST_REAL_NODE_DIR for
 * the test processes), waiting for the machine's node while another run holds it. Files that
 * start real nodes of their own (`own-real-node`) run afterwards, one at a time, once it has
 * stopped: a machine hosts one real node at a time.
 *
 * The verdict: node's spec reporter prints its own summary (pass, fail, cancelled, skipped,
 * todo); the runner adds one line with the same counts and the number of files skipped, and
 * exits non-zero when any test failed or was cancelled. A run that passed with files skipped
 * says so in capitals on its last line (`# PASSED WITH 2 FILES SKIPPED: ...`), never a bare
 * `# PASSED`.
 *
 * MLMODEL_TEST_CLUSTER_DIR=DIR reuses a cluster started with `mlmodel cluster up --dir DIR`
 * (the fast loop while developing); MLMODEL_TEST_KUBECONFIG=PATH runs against another cluster;
 * MLMODEL_TEST_REAL_NODE_DIR=DIR reuses a cluster started with `mlmodel cluster up --real-node
 * --dir DIR --image ...` for the real-node files.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { down, readState, up } from "../src/cluster/index.ts";
import { ensureImage, imageNames } from "../src/images/index.ts";
import {
  prepareAndReport,
  requiredNames,
  splitUnavailable,
  unavailableFiles,
  withRequirements,
} from "../test/harness/prerequisites/engine.ts";
import { registry } from "../test/harness/prerequisites/index.ts";
import { planNeeds, runnerMarker } from "../test/harness/prerequisites/needs.ts";
import { realNodeDirEnv } from "../test/harness/realnode.ts";
import {
  mergePhases,
  type PhaseResult,
  parseSummaryLines,
  type SkippedFile,
  skippedFilesEnv,
  verdict,
} from "../test/harness/run-summary.ts";

const root = resolve(import.meta.dirname, "..");
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    unit: { type: "boolean" },
    only: { type: "boolean" },
    "keep-cluster": { type: "boolean" },
    "skip-checks": { type: "boolean" },
  },
});

function findTests(path: string): string[] {
  const full = resolve(root, path);
  if (statSync(full).isFile()) return [full];
  return readdirSync(full, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".test.ts"))
    .map((f) => join(full, f))
    .sort();
}

function step(name: string, command: string, args: string[]): void {
  console.log(`\n# ${name}: ${command} ${args.join(" ")}`);
  const result = spawnSync(command, args, { cwd: root, stdio: "inherit" });
  if (result.status !== 0) {
    console.error(`# ${name} failed`);
    process.exit(result.status ?? 1);
  }
}

/**
 * Checks and installs what the files need; exits on a failed install. Returns the files to skip
 * (an unavailable prerequisite) and those that had to run but cannot (a required one).
 */
async function prepareFor(
  needs: Map<string, string[]>,
): Promise<{ skipped: SkippedFile[]; notRun: SkippedFile[]; ready: Set<string> }> {
  const wanted = withRequirements(registry, new Set([...needs.values()].flat()));
  if (wanted.length === 0) return { skipped: [], notRun: [], ready: new Set() };
  console.log(`\n# prerequisites: ${wanted.map((p) => p.name).join(", ")}`);
  const { outcomes, failed } = await prepareAndReport(wanted, "# [prerequisites] ");
  if (failed > 0) {
    console.error(`# FAILED: ${failed} prerequisite(s) could not be installed; no tests were run`);
    process.exit(1);
  }
  const ready = new Set(outcomes.filter((o) => o.state !== "unavailable").map((o) => o.name));
  const split = splitUnavailable(
    unavailableFiles(needs, outcomes),
    needs,
    outcomes,
    requiredNames(),
    registry,
  );
  return { ...split, ready };
}

const roots = values.only
  ? positionals
  : values.unit
    ? ["test/unit"]
    : ["test", "examples"].filter((p) => existsSync(resolve(root, p)));
const allFiles = roots.flatMap(findTests);
if (allFiles.length === 0) {
  console.error(`# no test files under ${roots.join(", ")}`);
  process.exit(2);
}
let needs: Map<string, string[]>;
try {
  needs = planNeeds(
    allFiles.map((f) => ({ file: relative(root, f), source: readFileSync(f, "utf8") })),
    new Set(registry.map((p) => p.name)),
  );
} catch (err) {
  console.error(`# ${(err as Error).message}`);
  process.exit(2);
}
const needsOfFile = (f: string) => needs.get(relative(root, f)) ?? [];

if (!values["skip-checks"] && !values.only) {
  const bin = (name: string) => join(root, "node_modules", ".bin", name);
  step("typecheck", bin("tsc"), ["--noEmit", "-p", "."]);
  step("lint", bin("biome"), ["ci", "."]);
}

const prepared = await prepareFor(needs);
const skippedFiles = prepared.skipped;
const notRunFiles = [...prepared.notRun];
const excluded = new Set([...skippedFiles, ...notRunFiles].map((s) => s.file));
let files = allFiles.filter((f) => !excluded.has(relative(root, f)));
const needsCluster = files.some((f) => needsOfFile(f).includes("cluster"));

/** A cluster the run started (stopped at the end) or reused (left running). */
interface RunCluster {
  env: NodeJS.ProcessEnv;
  stop?: () => Promise<void>;
}

/** The shared kwok cluster: MLMODEL_TEST_CLUSTER_DIR's, MLMODEL_TEST_KUBECONFIG's, or one of the run's own. */
async function sharedCluster(): Promise<RunCluster> {
  const reuse = process.env.MLMODEL_TEST_CLUSTER_DIR;
  const reused = reuse ? await readState(reuse) : undefined;
  if (reuse && !reused) {
    console.error(
      `# MLMODEL_TEST_CLUSTER_DIR=${reuse} holds no running cluster; start one with: mlmodel cluster up --dir ${reuse}`,
    );
    process.exit(1);
  }
  if (reused) {
    console.log(`# reusing the local control plane in ${reuse} (left running afterwards)`);
    return { env: { KUBECONFIG: reused.kubeconfig } };
  }
  if (process.env.MLMODEL_TEST_KUBECONFIG) {
    console.log(`# using the cluster in MLMODEL_TEST_KUBECONFIG=${process.env.MLMODEL_TEST_KUBECONFIG}`);
    return { env: { KUBECONFIG: process.env.MLMODEL_TEST_KUBECONFIG } };
  }
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-test-cluster-"));
  console.log(`# starting a local control plane in ${dir}`);
  try {
    const state = await up({
      dir,
      stopWhenGone: values["keep-cluster"] ? undefined : process.pid,
      progress: (line) => console.log(`# [cluster] ${line}`),
    });
    return {
      env: { KUBECONFIG: state.kubeconfig, MLMODEL_TEST_CLUSTER_DIR: dir },
      stop: () => stopCluster(dir, "the local control plane"),
    };
  } catch (err) {
    console.error(
      `# BLOCKED: the local control plane did not start, so integration and e2e tests cannot run.`,
    );
    console.error(`# ${(err as Error).message}`);
    await down(dir).catch(() => {});
    process.exit(1);
  }
}

/**
 * The run's one real-node cluster (a machine hosts one real node), with the built images
 * imported: MLMODEL_TEST_REAL_NODE_DIR's when set (left running), else one of the run's own,
 * waiting for the machine's node while another run holds it. Undefined when it did not start
 * (its files are then failures, the others still run).
 */
async function realNodeCluster(withImages: boolean): Promise<RunCluster | { error: string }> {
  const reuse = process.env[realNodeDirEnv];
  if (reuse) {
    const state = await readState(reuse);
    if (!state?.realNode)
      return {
        error: `${realNodeDirEnv}=${reuse} holds no running cluster with a real node (mlmodel cluster up --real-node --dir ${reuse})`,
      };
    console.log(`# reusing the real-node cluster in ${reuse} (left running afterwards)`);
    return { env: { [realNodeDirEnv]: reuse } };
  }
  const images: string[] = [];
  if (withImages) for (const name of imageNames) images.push((await ensureImage(name)).archive);
  const dir = mkdtempSync(join(tmpdir(), "mlmodel-test-realnode-"));
  console.log(
    `# starting the run's real-node cluster in ${dir}${images.length ? ` with ${imageNames.join(", ")}` : ""}`,
  );
  try {
    await up({
      dir,
      realNode: true,
      images,
      stopWhenGone: values["keep-cluster"] ? undefined : process.pid,
      // Another run (or an engineer's cluster) may hold the machine's node: wait, saying so.
      nodeLockWaitMs: 60 * 60_000,
      progress: (line) => console.log(`# [real-node] ${line}`),
    });
    return { env: { [realNodeDirEnv]: dir }, stop: () => stopCluster(dir, "the real-node cluster") };
  } catch (err) {
    await down(dir).catch(() => {});
    return { error: `the run's real-node cluster did not start: ${(err as Error).message}` };
  }
}

async function stopCluster(dir: string, what: string): Promise<void> {
  if (values["keep-cluster"]) {
    console.log(`# ${what} kept: stop it with: mlmodel cluster down --dir ${dir}`);
    return;
  }
  const stopped = await down(dir);
  const leftovers = stopped?.leftovers.length ? `; LEFT BEHIND: ${stopped.leftovers.join(", ")}` : "";
  console.log(`# stopped ${what} (${stopped?.stopped.join(", ") ?? "nothing was running"})${leftovers}`);
}

/** One `node --test` invocation; its summary lines come from the summary reporter's file. */
function runNodeTest(testFiles: string[], env: NodeJS.ProcessEnv, concurrency: number): PhaseResult {
  const summaryDir = mkdtempSync(join(tmpdir(), "mlmodel-test-summary-"));
  const summaryFile = join(summaryDir, "summary.jsonl");
  const reporter = pathToFileURL(join(root, "test", "harness", "summary-reporter.ts")).href;
  const exitAfterTests = pathToFileURL(join(root, "test", "harness", "exit-after-tests.ts")).href;
  try {
    const result = spawnSync(
      process.execPath,
      [
        "--test",
        // A file whose tests have all ended exits even if it leaked a timer or a socket (not
        // --test-force-exit, which could lose a file's last results: see exit-after-tests.ts).
        `--import=${exitAfterTests}`,
        `--test-concurrency=${concurrency}`,
        "--test-timeout=900000",
        "--test-reporter=spec",
        "--test-reporter-destination=stdout",
        `--test-reporter=${reporter}`,
        `--test-reporter-destination=${summaryFile}`,
        ...testFiles,
      ],
      { cwd: root, stdio: "inherit", env },
    );
    const lines = existsSync(summaryFile) ? parseSummaryLines(readFileSync(summaryFile, "utf8")) : [];
    return { lines, exitStatus: result.status };
  } finally {
    rmSync(summaryDir, { recursive: true, force: true });
  }
}

// Files that start real nodes of their own run after the others, once the run's real node has
// stopped: one machine hosts one real node at a time.
const ownNodeFiles = files.filter((f) => needsOfFile(f).includes("own-real-node"));
let mainFiles = files.filter((f) => !ownNodeFiles.includes(f));
const needsRealNode = mainFiles.some((f) => needsOfFile(f).includes("real-node"));

const env: NodeJS.ProcessEnv = { ...process.env };
env[runnerMarker] = "1";
// Set when this runner itself runs inside a test (runner.test.ts): node --test would then write
// its protocol instead of the report.
delete env.NODE_TEST_CONTEXT;
env[skippedFilesEnv] = JSON.stringify(skippedFiles);
const clusters: RunCluster[] = [];
const phases: PhaseResult[] = [];
try {
  const [shared, real] = await Promise.all([
    needsCluster ? sharedCluster() : undefined,
    needsRealNode ? realNodeCluster(prepared.ready.has("images")) : undefined,
  ]);
  let realNode: RunCluster | undefined;
  for (const started of [shared, real]) {
    if (!started) continue;
    if ("error" in started) {
      console.error(`# ${started.error}`);
      const blocked = mainFiles.filter((f) => needsOfFile(f).includes("real-node"));
      notRunFiles.push(...blocked.map((f) => ({ file: relative(root, f), reason: started.error })));
      mainFiles = mainFiles.filter((f) => !blocked.includes(f));
      files = files.filter((f) => !blocked.includes(f));
      continue;
    }
    clusters.push(started);
    Object.assign(env, started.env);
    if (started === real) realNode = started;
  }

  const skippedNote = skippedFiles.length > 0 ? `, ${skippedFiles.length} SKIPPED` : "";
  const with_ = [needsCluster ? "a real control plane" : "", realNode ? "a real node" : ""].filter(Boolean);
  const mainPhase = [
    ...mainFiles,
    ...(skippedFiles.length > 0 ? [join(root, "test", "harness", "skipped.ts")] : []),
  ];
  // `node --test` without files runs every test file it finds: an empty phase is no phase.
  if (mainPhase.length > 0) {
    console.log(
      `\n# running ${mainFiles.length} test files${skippedNote}${with_.length ? ` (with ${with_.join(" and ")})` : ""}`,
    );
    phases.push(runNodeTest(mainPhase, env, 3));
  }
  if (realNode) {
    await realNode.stop?.();
    clusters.splice(clusters.indexOf(realNode), 1);
    delete env[realNodeDirEnv];
  }
  if (ownNodeFiles.length > 0) {
    console.log(
      `\n# running ${ownNodeFiles.length} test file(s) that start real nodes of their own, one at a time`,
    );
    phases.push(runNodeTest(ownNodeFiles, env, 1));
  }
} finally {
  for (const cluster of clusters.reverse()) await cluster.stop?.();
}
const merged = mergePhases(phases);
const v = verdict({ ...merged, skippedFiles, notRunFiles, root });
console.log(`\n${v.lines.join("\n")}`);
process.exit(v.ok ? 0 : 1);
