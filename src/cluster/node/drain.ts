/**
 * cordon, uncordon and drain in the Kubernetes meaning (what `kubectl drain` does): a cordoned
 * node takes no new pods; a drained node is cordoned and its pods evicted through the Eviction
 * API, so that a PodDisruptionBudget is honoured (an eviction it forbids is refused with 429 and
 * asked again until the budget allows it, or the time runs out).
 */
import { CoreV1Api, type KubeConfig, setHeaderOptions, type V1Pod } from "@kubernetes/client-node";
import type { ProgressFn } from "../binaries.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mergePatch = setHeaderOptions("Content-Type", "application/merge-patch+json");

export class DrainError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DrainError";
  }
}

/** Marks the node (un)schedulable: spec.unschedulable, as `kubectl cordon` and `uncordon` do. */
export async function setSchedulable(
  kubeConfig: KubeConfig,
  name: string,
  schedulable: boolean,
): Promise<void> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  await core.patchNode({ name, body: { spec: { unschedulable: schedulable ? null : true } } }, mergePatch);
}

/**
 * The pods a drain evicts: every pod bound to the node that has not finished, except mirror
 * pods (kubelet's own) and DaemonSet pods (their controller would put them back at once).
 */
export function podsToEvict(pods: V1Pod[]): V1Pod[] {
  return pods.filter(
    (pod) =>
      pod.status?.phase !== "Succeeded" &&
      pod.status?.phase !== "Failed" &&
      !pod.metadata?.annotations?.["kubernetes.io/config.mirror"] &&
      !pod.metadata?.ownerReferences?.some((o) => o.kind === "DaemonSet"),
  );
}

export interface DrainOptions {
  /** How long to keep asking for evictions a budget refuses, and to wait for the pods to go (default 5 min). */
  timeoutMs?: number;
  progress?: ProgressFn;
}

/** Cordons the node and evicts its pods through the Eviction API; resolves once they are gone. */
export async function drainNode(
  kubeConfig: KubeConfig,
  name: string,
  options: DrainOptions = {},
): Promise<string[]> {
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const progress = options.progress ?? (() => {});
  const deadline = Date.now() + (options.timeoutMs ?? 5 * 60_000);
  await setSchedulable(kubeConfig, name, false);
  const onNode = async () =>
    podsToEvict((await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${name}` })).items);
  const evicted = new Set<string>();
  let refusals = 0;
  for (;;) {
    const pending = (await onNode()).filter((pod) => !pod.metadata?.deletionTimestamp);
    if (pending.length === 0) break;
    for (const pod of pending) {
      const { name: podName = "", namespace = "" } = pod.metadata ?? {};
      try {
        await core.createNamespacedPodEviction({
          name: podName,
          namespace,
          body: { apiVersion: "policy/v1", kind: "Eviction", metadata: { name: podName, namespace } },
        });
        evicted.add(`${namespace}/${podName}`);
      } catch (err) {
        const code = (err as { code?: number }).code;
        // 404: gone already. 429: a PodDisruptionBudget does not allow it now; ask again.
        if (code === 404) continue;
        if (code !== 429) throw err;
        if (refusals++ % 10 === 0)
          progress(`eviction of ${namespace}/${podName} refused by its PodDisruptionBudget; asking again`);
      }
    }
    if (Date.now() > deadline)
      throw new DrainError(
        `drain of ${name}: ${pending.length} pods still not evicted after ${Math.round((options.timeoutMs ?? 300_000) / 1000)}s (${pending.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`).join(", ")}); a PodDisruptionBudget may forbid it`,
      );
    await sleep(1000);
  }
  while ((await onNode()).length > 0) {
    if (Date.now() > deadline) throw new DrainError(`drain of ${name}: evicted pods still terminating`);
    await sleep(500);
  }
  return [...evicted];
}
