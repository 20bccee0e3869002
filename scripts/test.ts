/**
 * `npm test`: type check, lint, then every test file in one `node --test` run. When any
 * integration or e2e test is selected, a real local control plane is started first (or the
 * cluster in MLMODEL_TEST_KUBECONFIG is used) and torn down at the end, even on failure.
 *
 *   node scripts/test.ts                 everything
 *   node scripts/test.ts --unit          unit tests only (no cluster)
 *   node scripts/test.ts --only PATH...  just these files or directories
 *   node scripts/test.ts --keep-cluster  leave the cluster running afterwards (prints its dir)
 *
 * MLMODEL_TEST_CLUSTER_DIR=DIR reuses a cluster started with `mlmodel cluster up --dir DIR`
 * (the fast loop while developing); MLMODEL_TEST_KUBECONFIG=PATH runs against another cluster.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { down, readState, up } from "../src/cluster/index.ts";

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

const roots = values.only
  ? positionals
  : values.unit
    ? ["test/unit"]
    : ["test", "examples"].filter((p) => existsSync(resolve(root, p)));
const files = roots.flatMap(findTests);
const needsCluster = files.some((f) => /(^|[/\\])(integration|e2e|examples)[/\\]/.test(relative(root, f)));

if (!values["skip-checks"] && !values.only) {
  const bin = (name: string) => join(root, "node_modules", ".bin", name);
  step("typecheck", bin("tsc"), ["--noEmit", "-p", "."]);
  step("lint", bin("biome"), ["ci", "."]);
}

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

let exitCode = 1;
try {
  console.log(`\n# running ${files.length} test files${needsCluster ? " (with a real control plane)" : ""}`);
  const result = spawnSync(
    process.execPath,
    ["--test", "--test-concurrency=3", "--test-timeout=900000", "--test-reporter=spec", ...files],
    { cwd: root, stdio: "inherit", env },
  );
  exitCode = result.status ?? 1;
} finally {
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
process.exit(exitCode);
