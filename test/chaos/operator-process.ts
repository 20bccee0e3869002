/**
 * The operator as a real child process (`mlmodel operator`), so a fault test can SIGKILL or
 * SIGSTOP it like a node would, under the operator's own ServiceAccount token (its generated
 * least-privilege RBAC, never admin). Each process gets a fresh token: the API server's audit
 * log names the token (credential id), which tells replicas of the same ServiceAccount apart.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { KubeConfig } from "@kubernetes/client-node";
import { freePort } from "../../bench/lib/cluster.ts";
import { operatorKubeconfig as benchKubeconfig, operatorUser } from "../../bench/operator/process.ts";
import type { KubeClient } from "../../src/runtime/index.ts";

const repoRoot = join(import.meta.dirname, "..", "..");

/**
 * The operator's audit-log user, and a kubeconfig with a fresh token of its ServiceAccount
 * (written into its own directory): shared with the benchmarks.
 */
export { operatorUser };

export async function operatorKubeconfig(
  admin: KubeClient,
  adminKc: KubeConfig,
  dir: string,
): Promise<string> {
  mkdirSync(dir, { recursive: true });
  return benchKubeconfig(admin, adminKc, dir);
}

export interface OperatorProcessOptions {
  kubeconfig: string;
  namespace: string;
  /** Appends the process's JSON log lines here (kept across restarts). */
  logFile: string;
  leaderElect?: boolean;
  /** Becomes the HOSTNAME, hence the prefix of the leader-election identity. */
  name?: string;
  concurrency?: number;
  logLevel?: string;
  /** The download Job's image (--downloader-image); default: the operator's default. */
  downloaderImage?: string;
}

/** One run of `mlmodel operator`. Restart = a new OperatorProcess with the same options. */
export class OperatorProcess {
  readonly child: ChildProcess;
  readonly metricsPort: number;
  readonly healthPort: number;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

  private constructor(child: ChildProcess, metricsPort: number, healthPort: number, logFile: string) {
    this.child = child;
    this.metricsPort = metricsPort;
    this.healthPort = healthPort;
    const log = createWriteStream(logFile, { flags: "a" });
    child.stdout?.pipe(log, { end: false });
    child.stderr?.pipe(log, { end: false });
    this.exited = new Promise((resolve) => {
      child.once("exit", (code, signal) => {
        this.#exit = { code, signal };
        resolve(this.#exit);
      });
    });
  }

  static async start(opts: OperatorProcessOptions): Promise<OperatorProcess> {
    const metricsPort = await freePort();
    const healthPort = await freePort();
    const args = [
      join(repoRoot, "src", "cli", "main.ts"),
      "operator",
      "--kubeconfig",
      opts.kubeconfig,
      "--namespace",
      opts.namespace,
      "--metrics-bind-address",
      `127.0.0.1:${metricsPort}`,
      "--health-probe-bind-address",
      `127.0.0.1:${healthPort}`,
      "--concurrency",
      String(opts.concurrency ?? 4),
      "--log-level",
      opts.logLevel ?? "info",
      ...(opts.leaderElect ? ["--leader-elect"] : []),
      ...(opts.downloaderImage ? ["--downloader-image", opts.downloaderImage] : []),
    ];
    const child = spawn(process.execPath, args, {
      cwd: repoRoot,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, HOSTNAME: opts.name ?? "chaos-operator", KUBECONFIG: opts.kubeconfig },
    });
    return new OperatorProcess(child, metricsPort, healthPort, opts.logFile);
  }

  get pid(): number {
    return this.child.pid!;
  }

  get alive(): boolean {
    return this.#exit === undefined;
  }

  get exitStatus() {
    return this.#exit;
  }

  /** Sends `signal` and, for SIGKILL/SIGTERM, waits for the exit. */
  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    if (!this.alive) return;
    this.child.kill(signal);
    if (signal === "SIGKILL" || signal === "SIGTERM") await this.exited;
  }

  /** HTTP status of a probe path, or 0 when nothing answers. */
  async probe(path: "/readyz" | "/healthz"): Promise<number> {
    return (await this.probeText(path)).status;
  }

  /** Status and body of a probe path (status 0, body "" when nothing answers within 2 s). */
  async probeText(path: "/readyz" | "/healthz"): Promise<{ status: number; body: string }> {
    try {
      const res = await fetch(`http://127.0.0.1:${this.healthPort}${path}`, {
        signal: AbortSignal.timeout(2000),
      });
      return { status: res.status, body: await res.text() };
    } catch {
      return { status: 0, body: "" };
    }
  }

  /** The Prometheus text of /metrics, parsed to `name{labels}` -> value. */
  async metrics(): Promise<Map<string, number>> {
    const res = await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`, {
      signal: AbortSignal.timeout(5000),
    });
    return parseMetrics(await res.text());
  }

  /** Resident set size from /proc (bytes), undefined once the process is gone. */
  rssBytes(): number | undefined {
    try {
      const status = readFileSync(`/proc/${this.pid}/status`, "utf8");
      const kb = /VmRSS:\s+(\d+)/.exec(status)?.[1];
      return kb ? Number(kb) * 1024 : undefined;
    } catch {
      return undefined;
    }
  }
}

export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

/** Sum of every series of `name` whose labels contain all of `match` (e.g. `code="429"`). */
export function metricSum(metrics: Map<string, number>, name: string, ...match: string[]): number {
  let sum = 0;
  for (const [series, value] of metrics) {
    if (series !== name && !series.startsWith(`${name}{`)) continue;
    if (match.every((m) => series.includes(m))) sum += value;
  }
  return sum;
}

/** Waits until the process's caches are synced (/readyz 200) or it exits. */
export async function waitReady(op: OperatorProcess, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!op.alive) throw new Error(`operator exited before it was ready: ${JSON.stringify(op.exitStatus)}`);
    if ((await op.probe("/readyz")) === 200) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`operator not ready after ${timeoutMs / 1000}s`);
}
