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
 * downloader's test servers, openssl. Each test file's needs come from its directory and its
 * `// test-needs:` line; the missing ones are installed into caches outside the repo first, with
 * progress. A failed install stops the run naming what failed and how to install it by hand; a
 * prerequisite unavailable on this machine turns the files that need it into skipped tests.
 *
 * The verdict: node's spec reporter prints its own summary (pass, fail, cancelled, skipped,
 * todo); the runner adds one line with the same counts and exits non-zero when any test failed
 * or was cancelled.
 *
 * MLMODEL_TEST_CLUSTER_DIR=DIR reuses a cluster started with `mlmodel cluster up --dir DIR`
 * (the fast loop while developing); MLMODEL_TEST_KUBECONFIG=PATH runs against another cluster.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { down, readState, up } from "../src/cluster/index.ts";
import {
  prepareAndReport,
  unavailableFiles,
  withRequirements,
} from "../test/harness/prerequisites/engine.ts";
import { registry } from "../test/harness/prerequisites/index.ts";
import { planNeeds, runnerMarker } from "../test/harness/prerequisites/needs.ts";
import {
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

/** Checks and installs what the files need; exits on a failed install. Returns the skipped files. */
async function prepareFor(needs: Map<string, string[]>): Promise<SkippedFile[]> {
  const wanted = withRequirements(registry, new Set([...needs.values()].flat()));
  if (wanted.length === 0) return [];
  console.log(`\n# prerequisites: ${wanted.map((p) => p.name).join(", ")}`);
  const { outcomes, failed } = await prepareAndReport(wanted, "# [prerequisites] ");
  if (failed > 0) {
    console.error(`# FAILED: ${failed} prerequisite(s) could not be installed; no tests were run`);
    process.exit(1);
  }
  return unavailableFiles(needs, outcomes);
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

if (!values["skip-checks"] && !values.only) {
  const bin = (name: string) => join(root, "node_modules", ".bin", name);
  step("typecheck", bin("tsc"), ["--noEmit", "-p", "."]);
  step("lint", bin("biome"), ["ci", "."]);
}

const skippedFiles = await prepareFor(needs);
const skipped = new Set(skippedFiles.map((s) => s.file));
const files = allFiles.filter((f) => !skipped.has(relative(root, f)));
const needsCluster = files.some((f) => needs.get(relative(root, f))?.includes("cluster"));

let clusterDir: string | undefined;
const env: NodeJS.ProcessEnv = { ...process.env };
if (needsCluster) {
  const reuse = process.env.MLMODEL_TEST_CLUSTER_DIR;
  const reused = reuse ? await readState(reuse) : undefined;
  if (reuse && !reused) {
    console.error(
      `# MLMODEL_TEST_CLUSTER_DIR=${reuse} holds no running cluster; start one with: mlmodel cluster up --dir ${reuse}`,
    );
    process.exit(1);
  }
  if (reused) {
    env.KUBECONFIG = reused.kubeconfig;
    console.log(`# reusing the local control plane in ${reuse} (left running afterwards)`);
  } else if (process.env.MLMODEL_TEST_KUBECONFIG) {
    env.KUBECONFIG = process.env.MLMODEL_TEST_KUBECONFIG;
    console.log(`# using the cluster in MLMODEL_TEST_KUBECONFIG=${env.KUBECONFIG}`);
  } else {
    clusterDir = mkdtempSync(join(tmpdir(), "mlmodel-test-cluster-"));
    console.log(`# starting a local control plane in ${clusterDir}`);
    try {
      const state = await up({
        dir: clusterDir,
        stopWhenGone: values["keep-cluster"] ? undefined : process.pid,
        progress: (line) => console.log(`# [cluster] ${line}`),
      });
      env.KUBECONFIG = state.kubeconfig;
      env.MLMODEL_TEST_CLUSTER_DIR = clusterDir;
    } catch (err) {
      console.error(
        `# BLOCKED: the local control plane did not start, so integration and e2e tests cannot run.`,
      );
      console.error(`# ${(err as Error).message}`);
      await down(clusterDir).catch(() => {});
      process.exit(1);
    }
  }
}

env[runnerMarker] = "1";
// Set when this runner itself runs inside a test (runner.test.ts): node --test would then write
// its protocol instead of the report.
delete env.NODE_TEST_CONTEXT;
env[skippedFilesEnv] = JSON.stringify(skippedFiles);
const summaryDir = mkdtempSync(join(tmpdir(), "mlmodel-test-summary-"));
const summaryFile = join(summaryDir, "summary.jsonl");
const reporter = pathToFileURL(join(root, "test", "harness", "summary-reporter.ts")).href;
let ok = false;
try {
  const skippedNote = skippedFiles.length > 0 ? `, ${skippedFiles.length} skipped` : "";
  console.log(
    `\n# running ${files.length} test files${skippedNote}${needsCluster ? " (with a real control plane)" : ""}`,
  );
  const result = spawnSync(
    process.execPath,
    [
      "--test",
      // A file whose tests have all ended exits even if it leaked a timer or a socket: otherwise
      // one leak (seen after a failed before hook) hangs the whole run, and CI, forever.
      "--test-force-exit",
      "--test-concurrency=3",
      "--test-timeout=900000",
      "--test-reporter=spec",
      "--test-reporter-destination=stdout",
      `--test-reporter=${reporter}`,
      `--test-reporter-destination=${summaryFile}`,
      ...files,
      ...(skippedFiles.length > 0 ? [join(root, "test", "harness", "skipped.ts")] : []),
    ],
    { cwd: root, stdio: "inherit", env },
  );
  const summary = existsSync(summaryFile) ? parseSummaryLines(readFileSync(summaryFile, "utf8")) : [];
  const v = verdict({ lines: summary, exitStatus: result.status, skippedFiles, root });
  console.log(`\n${v.lines.join("\n")}`);
  ok = v.ok;
} finally {
  rmSync(summaryDir, { recursive: true, force: true });
  if (clusterDir && !values["keep-cluster"]) {
    const stopped = await down(clusterDir);
    console.log(
      `# stopped the local control plane (${stopped?.stopped.join(", ") ?? "nothing was running"})`,
    );
  } else if (clusterDir) {
    console.log(
      `# cluster kept: KUBECONFIG=${env.KUBECONFIG}; stop it with: mlmodel cluster down --dir ${clusterDir}`,
    );
  }
}
process.exit(ok ? 0 : 1);
