/** Shared bits of the runtime benches: kubeconfig from $KUBECONFIG, percentiles, bulk create. */
import { KubeConfig } from "@kubernetes/client-node";
import { ApiError, builtinKinds, type KubeClient } from "../../src/runtime/index.ts";

export function benchKubeConfig(): KubeConfig {
  if (!process.env["KUBECONFIG"]) {
    console.error(
      "set KUBECONFIG (e.g. node src/cli/main.ts cluster up --dir /tmp/dev; export KUBECONFIG=/tmp/dev/admin.kubeconfig)",
    );
    process.exit(2);
  }
  const kc = new KubeConfig();
  kc.loadFromDefault();
  return kc;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function ensureNamespace(client: KubeClient, name: string): Promise<void> {
  try {
    await client.create(builtinKinds.Namespace, { apiVersion: "v1", kind: "Namespace", metadata: { name } });
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 409)) throw err;
  }
}

/** Creates ConfigMaps cm-0..cm-(n-1) that do not exist yet, `parallel` at a time. */
export async function ensureConfigMaps(
  client: KubeClient,
  namespace: string,
  n: number,
  parallel = 16,
): Promise<void> {
  const have = new Set<string>();
  let cont: string | undefined;
  do {
    const page = await client.list(builtinKinds.ConfigMap, {
      namespace,
      limit: 500,
      ...(cont ? { continue: cont } : {}),
    });
    for (const o of page.items) have.add(o.metadata.name!);
    cont = page.continue;
  } while (cont);
  const todo = Array.from({ length: n }, (_, i) => `cm-${i}`).filter((x) => !have.has(x));
  let next = 0;
  const worker = async () => {
    while (next < todo.length) {
      const name = todo[next++]!;
      await client.apply(
        builtinKinds.ConfigMap,
        {
          apiVersion: "v1",
          kind: "ConfigMap",
          metadata: { name, namespace, labels: { app: "bench", shard: String(next % 10) } },
          data: { config: `key=${name}\nvalue=${"x".repeat(64)}\n` },
        },
        { fieldManager: "runtime-bench" },
      );
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
}
