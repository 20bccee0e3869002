/**
 * What the install e2e tests share: the cached kubectl, a kubeconfig that authenticates as the
 * installed ServiceAccount (a bound token, never the admin's certificate), free ports, and the
 * operator run as a separate process the way a user runs it.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { ensureBinaries } from "../../../src/cluster/index.ts";
import { ensureBundle } from "../../../src/images/bundle.ts";
import type { KubeObject } from "../../../src/runtime/index.ts";

export const repoRoot = join(import.meta.dirname, "..", "..", "..");

export interface CommandResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the cached kubectl (the one the local control plane was built with). */
export async function kubectl(kubeconfig: string, args: string[]): Promise<CommandResult> {
  const { kubectl: bin } = await ensureBinaries();
  const r = spawnSync(bin, ["--kubeconfig", kubeconfig, ...args], { cwd: repoRoot, encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** kubectl that must succeed: its stdout, or an error with its stderr. */
export async function kubectlOk(kubeconfig: string, args: string[]): Promise<string> {
  const r = await kubectl(kubeconfig, args);
  if (r.status !== 0) throw new Error(`kubectl ${args.join(" ")} failed (exit ${r.status}):\n${r.stderr}`);
  return r.stdout;
}

export function parseYamlStream(text: string): KubeObject[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as KubeObject | null)
    .filter((o): o is KubeObject => o !== null);
}

/** A kubeconfig file whose only credential is a token of `serviceAccount` in `namespace`. */
export async function serviceAccountKubeConfig(
  admin: KubeConfig,
  namespace: string,
  serviceAccount: string,
  path: string,
): Promise<KubeConfig> {
  const res = await admin.makeApiClient(CoreV1Api).createNamespacedServiceAccountToken({
    name: serviceAccount,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const token = res.status?.token;
  if (!token)
    throw new Error(`the API server returned no token for ServiceAccount ${namespace}/${serviceAccount}`);
  const cluster = admin.getCurrentCluster()!;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "local", server: cluster.server, caData: cluster.caData, skipTLSVerify: false }],
    users: [{ name: serviceAccount, token }],
    contexts: [{ name: serviceAccount, cluster: "local", user: serviceAccount }],
    currentContext: serviceAccount,
  });
  writeFileSync(path, kc.exportConfig(), { mode: 0o600 });
  return kc;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (!address || typeof address === "string") throw new Error("no free port");
  return address.port;
}

export interface OperatorProcess {
  child: ChildProcess;
  /** Everything the process logged so far (JSON lines on stdout, errors on stderr). */
  output(): string;
  healthAddress: string;
  stop(): Promise<number | null>;
}

/**
 * `mlmodel operator ...args` as the image runs it (the bundled CLI, src/images/bundle.ts,
 * built from the checkout's sources), as a child process with probes on a free port.
 */
export async function startOperatorProcess(args: string[]): Promise<OperatorProcess> {
  const healthAddress = `127.0.0.1:${await freePort()}`;
  const child = spawn(
    process.execPath,
    [
      (await ensureBundle(repoRoot)).entry,
      "operator",
      `--health-probe-bind-address=${healthAddress}`,
      "--metrics-bind-address=0",
      ...args,
    ],
    { cwd: repoRoot, env: { ...process.env, KUBECONFIG: "" }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    output: () => output,
    healthAddress,
    async stop() {
      if (child.exitCode === null) child.kill("SIGTERM");
      return exited;
    },
  };
}
