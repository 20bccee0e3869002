/**
 * The operator as a separate process, as it runs in production: `mlmodel operator` under its
 * own ServiceAccount (the least-privilege RBAC that `mlmodel install` creates, not admin),
 * metrics and probes on loopback ports, its CPU and memory read from /proc.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { openSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, type KubeConfig } from "@kubernetes/client-node";
import { ensureBundle } from "../../src/images/bundle.ts";
import { install } from "../../src/install/install.ts";
import { defaultOperatorNamespace } from "../../src/install/manifests.ts";
import { operatorName } from "../../src/operator/names.ts";
import type { KubeClient } from "../../src/runtime/index.ts";
import { freePort } from "../lib/cluster.ts";
import { type ProcStats, procStats } from "../lib/proc.ts";
import { parsePrometheus, type Sample } from "../lib/prometheus.ts";

const repo = join(import.meta.dirname, "..", "..");

/** NODE_OPTIONS of the image (Dockerfile): the operator is measured with the flags it runs with. */
export function imageNodeOptions(dockerfile = readFileSync(join(repo, "Dockerfile"), "utf8")): string {
  return (
    /^ENV NODE_OPTIONS=(.*)$/m
      .exec(dockerfile)?.[1]
      ?.trim()
      .replace(/^"(.*)"$/, "$1") ?? ""
  );
}

/** The operator's user name in the audit log. */
export const operatorUser = `system:serviceaccount:${defaultOperatorNamespace}:${operatorName}`;

/**
 * Installs CRDs and RBAC, and writes a kubeconfig that authenticates as the operator's
 * ServiceAccount. In JSON: the operator reads it without loading `yaml`, as in a pod, where
 * it reads the in-cluster config (bench/README.md, phase D).
 */
export async function operatorKubeconfig(
  admin: KubeClient,
  adminKc: KubeConfig,
  dir: string,
): Promise<string> {
  await install(admin);
  const res = await adminKc.makeApiClient(CoreV1Api).createNamespacedServiceAccountToken({
    name: operatorName,
    namespace: defaultOperatorNamespace,
    body: { spec: { audiences: [], expirationSeconds: 6 * 3600 } },
  });
  const token = res.status?.token;
  if (!token) throw new Error("the API server returned no ServiceAccount token");
  const cluster = adminKc.getCurrentCluster()!;
  const caData =
    cluster.caData ?? (cluster.caFile ? readFileSync(cluster.caFile).toString("base64") : undefined);
  const path = join(dir, "operator.kubeconfig");
  writeFileSync(
    path,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        { name: "bench", cluster: { server: cluster.server, "certificate-authority-data": caData } },
      ],
      users: [{ name: operatorName, user: { token } }],
      contexts: [{ name: "operator", context: { cluster: "bench", user: operatorName } }],
      "current-context": "operator",
    }),
    { mode: 0o600 },
  );
  return path;
}

export interface OperatorProcess {
  pid: number;
  metrics(): Promise<Sample[]>;
  stats(): ProcStats;
  stop(): Promise<void>;
}

export async function startOperatorProcess(opts: {
  kubeconfig: string;
  namespace: string;
  concurrency: number;
  logFile: string;
  /** Extra Node flags, e.g. --cpu-prof (profiles), before the script. */
  nodeFlags?: string[];
  /**
   * The node cache, as the operator finds it when installed with it: its URL (--node-cache-url)
   * and its namespace ($POD_NAMESPACE, also watched: the agents' state ConfigMaps are there).
   */
  nodeCache?: { url: string; namespace: string };
}): Promise<OperatorProcess> {
  const [metricsPort, healthPort] = [await freePort(), await freePort()];
  const log = openSync(opts.logFile, "a");
  // As the image runs it: its entrypoint is the bundled CLI (src/images/bundle.ts, the same
  // build, cached by content in dist/bundle), with a compile cache filled when the image was
  // built (Dockerfile). Filled here the same way, for these Node flags (the cache is per flag
  // set): a bundle changed since the last run would otherwise be compiled again at start.
  const launcher = (await ensureBundle(repo)).entry;
  // The image sets NODE_COMPILE_CACHE; here Node's own default directory for it.
  const env = {
    ...process.env,
    NODE_OPTIONS: imageNodeOptions(),
    NODE_COMPILE_CACHE: process.env["NODE_COMPILE_CACHE"] || join(tmpdir(), "node-compile-cache"),
    ...(opts.nodeCache ? { POD_NAMESPACE: opts.nodeCache.namespace } : {}),
  };
  const nodeCacheFlags = opts.nodeCache
    ? ["--node-cache-url", opts.nodeCache.url, "--namespace", opts.nodeCache.namespace]
    : [];
  const cacheFlags = (opts.nodeFlags ?? []).filter((f) => !/^--(cpu-prof|heap|diagnostic-dir)/.test(f));
  spawnSync(process.execPath, [...cacheFlags, launcher, "operator", "--help"], { stdio: "ignore", env });
  const child = spawn(
    process.execPath,
    [
      ...(opts.nodeFlags ?? []),
      launcher,
      "operator",
      "--kubeconfig",
      opts.kubeconfig,
      "--namespace",
      opts.namespace,
      "--concurrency",
      String(opts.concurrency),
      "--metrics-bind-address",
      `127.0.0.1:${metricsPort}`,
      "--health-probe-bind-address",
      `127.0.0.1:${healthPort}`,
      ...nodeCacheFlags,
      "--log-level",
      "warn",
    ],
    { stdio: ["ignore", log, log], env },
  );
  // The operator must not outlive the benchmark, even one stopped by Ctrl-C.
  const killOnExit = () => child.kill("SIGTERM");
  process.once("exit", killOnExit);
  const exited = new Promise<number | null>((resolve) =>
    child.once("exit", (code) => {
      process.off("exit", killOnExit);
      resolve(code);
    }),
  );
  await waitReady(child, healthPort, opts.logFile);
  return {
    pid: child.pid!,
    async metrics() {
      const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
      return parsePrometheus(await res.text());
    },
    stats: () => procStats(child.pid!),
    async stop() {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** Waits for /readyz (caches synced); fails with the operator's log if it exits first. */
async function waitReady(child: ChildProcess, port: number, logFile: string): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(
        `operator exited with ${child.exitCode}:\n${readFileSync(logFile, "utf8").slice(-2000)}`,
      );
    }
    const ok = await fetch(`http://127.0.0.1:${port}/readyz`)
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  child.kill("SIGTERM");
  throw new Error(`operator not ready after 120 s; log: ${logFile}`);
}
