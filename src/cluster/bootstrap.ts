/** What a fresh cluster needs before it is useful: fake nodes that kwok manages. */
import { CoreV1Api, KubeConfig, type V1Node } from "@kubernetes/client-node";

export function adminClient(kubeconfig: string): CoreV1Api {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return kc.makeApiClient(CoreV1Api);
}

/** kwok manages nodes with this annotation (see the --manage-nodes-with-annotation-selector flag). */
export const fakeNodeAnnotation = { "kwok.x-k8s.io/node": "fake" };

export interface Taint {
  key: string;
  value: string;
  effect: string;
}

/**
 * Node i: the first one has a GPU, so scheduling of GPU models can be exercised. `taint` keeps
 * pods that do not tolerate it away (beside a real node, kwok nodes are opt-in).
 */
export function fakeNode(index: number, taint?: Taint): V1Node {
  const gpu = index === 0;
  const capacity: Record<string, string> = {
    cpu: "16",
    memory: "64Gi",
    pods: "110",
    "ephemeral-storage": "500Gi",
  };
  if (gpu) capacity["nvidia.com/gpu"] = "1";
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: {
      name: `kwok-node-${index}`,
      annotations: { ...fakeNodeAnnotation, "node.alpha.kubernetes.io/ttl": "0" },
      labels: {
        "kubernetes.io/hostname": `kwok-node-${index}`,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node-role.kubernetes.io/agent": "",
        type: "kwok",
        ...(gpu ? { "nvidia.com/gpu.present": "true" } : {}),
      },
    },
    spec: taint ? { taints: [taint] } : {},
    status: { capacity, allocatable: capacity },
  };
}

export async function createFakeNodes(client: CoreV1Api, count: number, taint?: Taint): Promise<string[]> {
  const names: string[] = [];
  for (let i = 0; i < count; i++) {
    const node = await client.createNode({ body: fakeNode(i, taint) });
    names.push(node.metadata!.name!);
  }
  return names;
}

export async function waitForNodesReady(client: CoreV1Api, names: string[]): Promise<boolean> {
  const list = await client.listNode();
  const ready = new Set(
    list.items
      .filter((n) => n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"))
      .map((n) => n.metadata?.name),
  );
  return names.every((name) => ready.has(name));
}

/** The service-account controller has run once the default namespace has its default account. */
export async function waitForDefaultServiceAccount(client: CoreV1Api): Promise<boolean> {
  try {
    await client.readNamespacedServiceAccount({ name: "default", namespace: "default" });
    return true;
  } catch {
    return false;
  }
}
