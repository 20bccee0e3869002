/**
 * What integration and e2e tests share: the real control plane that `scripts/test.ts` started
 * (reached through KUBECONFIG), a namespace per test, and a polling helper.
 *
 * Tests never talk to a fake API server. A test run without KUBECONFIG fails loudly rather
 * than skipping, so that "no cluster" can never pass as "all green".
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";

export function kubeConfig(): KubeConfig {
  const path = process.env.KUBECONFIG;
  if (!path) {
    throw new Error(
      "KUBECONFIG is not set: run integration tests through `npm test` (scripts/test.ts), which starts a real control plane",
    );
  }
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

export function coreApi(kc = kubeConfig()): CoreV1Api {
  return kc.makeApiClient(CoreV1Api);
}

/** Facts about the local control plane started for this run (absent on an external cluster). */
export interface LocalCluster {
  dir: string;
  etcdEndpoint: string;
  auditLog: string;
  server: string;
}

export function localCluster(): LocalCluster | undefined {
  const dir = process.env.MLMODEL_TEST_CLUSTER_DIR;
  if (!dir) return undefined;
  const state = JSON.parse(readFileSync(join(dir, "state.json"), "utf8")) as {
    etcdEndpoint: string;
    server: string;
  };
  return {
    dir,
    etcdEndpoint: state.etcdEndpoint,
    server: state.server,
    auditLog: join(dir, "logs", "audit.log"),
  };
}

export interface TestNamespace {
  name: string;
  /** Deletes the namespace; waits until it is gone when `wait` is set. */
  delete(wait?: boolean): Promise<void>;
}

/**
 * A fresh namespace for one test. `podSecurity: "restricted"` labels it to enforce the
 * restricted Pod Security level, so the API server rejects pods that do not meet it.
 */
export async function createNamespace(
  prefix: string,
  options: { podSecurity?: "restricted" | "baseline" | "privileged"; labels?: Record<string, string> } = {},
): Promise<TestNamespace> {
  const core = coreApi();
  const name = `${prefix}-${randomBytes(3).toString("hex")}`.toLowerCase();
  const labels: Record<string, string> = { "mlmodel.dev/test": "true", ...options.labels };
  if (options.podSecurity) {
    labels["pod-security.kubernetes.io/enforce"] = options.podSecurity;
    labels["pod-security.kubernetes.io/enforce-version"] = "latest";
  }
  await core.createNamespace({ body: { metadata: { name, labels } } });
  await waitFor(`service account default in ${name}`, async () => {
    try {
      await core.readNamespacedServiceAccount({ name: "default", namespace: name });
      return true;
    } catch {
      return false;
    }
  });
  return {
    name,
    async delete(wait = false) {
      await core.deleteNamespace({ name }).catch(() => {});
      if (wait) {
        await waitFor(`namespace ${name} to be deleted`, async () => {
          try {
            await core.readNamespace({ name });
            return false;
          } catch {
            return true;
          }
        });
      }
    },
  };
}

/**
 * Polls `check` until it returns a truthy value and returns that value. The timeout is a
 * liveness bound (a stuck test must end), not a performance assertion: keep it generous.
 */
export async function waitFor<T>(
  what: string,
  check: () => Promise<T | undefined | false | null>,
  options: {
    timeoutMs?: number;
    intervalMs?: number;
    /** What the state was when the wait timed out, for the error (a failed run is read from CI's log alone). */
    describe?: () => Promise<string>;
  } = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 120_000;
  const intervalMs = options.intervalMs ?? 200;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      const suffix = lastError ? ` (last error: ${(lastError as Error).message})` : "";
      const state = options.describe ? await options.describe().catch((err: Error) => err.message) : "";
      throw new Error(
        `timed out after ${timeoutMs / 1000}s waiting for ${what}${suffix}${state ? `; state: ${state}` : ""}`,
      );
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * A control plane of the test file's own, for tests that inject faults (API server restarts,
 * etcd compaction): doing that to the run's shared cluster would break the tests running
 * beside them. Costs about 10 s to start (binaries are cached by then).
 */
export interface PrivateCluster {
  dir: string;
  kubeconfigPath: string;
  kubeConfig(): KubeConfig;
  etcdEndpoint: string;
  auditLog: string;
  /** Stops the API server and starts it again on the same port after `downtimeMs`. */
  restartApiServer(downtimeMs?: number): Promise<void>;
  /** Compacts etcd at its current revision (older resourceVersions then get 410 Gone). */
  compactEtcd(): Promise<number>;
  stop(): Promise<void>;
}

export async function startPrivateCluster(name = "private"): Promise<PrivateCluster> {
  const { mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { down, restartComponent, up } = await import("../../src/cluster/index.ts");
  const dir = mkdtempSync(join(tmpdir(), `mlmodel-${name}-`));
  const state = await up({ dir, nodes: 1, stopWhenGone: process.pid });
  return {
    dir,
    kubeconfigPath: state.kubeconfig,
    kubeConfig() {
      const kc = new KubeConfig();
      kc.loadFromFile(state.kubeconfig);
      return kc;
    },
    etcdEndpoint: state.etcdEndpoint,
    auditLog: join(dir, "logs", "audit.log"),
    async restartApiServer(downtimeMs = 0) {
      await restartComponent(dir, "kube-apiserver", { downtimeMs });
    },
    compactEtcd: () => compactEtcd(dir),
    async stop() {
      await down(dir);
    },
  };
}

/**
 * Compacts the etcd of the cluster in `dir` at its current revision, so that a watch or list
 * from an older resourceVersion gets 410 Gone. Returns the revision compacted at. etcd admits
 * only the API server's client certificate, which this presents (src/cluster).
 */
export async function compactEtcd(dir: string): Promise<number> {
  const { compactEtcd: compact } = await import("../../src/cluster/cluster.ts");
  return compact(dir);
}
