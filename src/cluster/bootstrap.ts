/** What a fresh cluster needs before it is useful: kwok's permissions and fake nodes that kwok manages. */
import {
  CoreV1Api,
  KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  type V1ClusterRole,
  type V1ClusterRoleBinding,
  type V1Node,
} from "@kubernetes/client-node";
import { kwokIdentity } from "./pki.ts";

export function adminClient(kubeconfig: string): CoreV1Api {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return kc.makeApiClient(CoreV1Api);
}

/**
 * What kwok does, and no more: it watches nodes and pods, writes the status its stages play
 * (nodes/status, pods/status), heartbeats node leases, removes a deleted pod's finalizers and
 * the pod itself (pod-delete), and records events. Its Stage CRDs are not used: the stages
 * come from controlplane/kwok/stages.yaml.
 */
export function kwokRbac(): { role: V1ClusterRole; binding: V1ClusterRoleBinding } {
  const name = kwokIdentity;
  return {
    role: {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name },
      rules: [
        { apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch"] },
        { apiGroups: [""], resources: ["nodes/status"], verbs: ["patch", "update"] },
        {
          apiGroups: [""],
          resources: ["pods"],
          verbs: ["get", "list", "watch", "patch", "update", "delete"],
        },
        { apiGroups: [""], resources: ["pods/status"], verbs: ["patch", "update"] },
        {
          apiGroups: ["coordination.k8s.io"],
          resources: ["leases"],
          verbs: ["get", "list", "watch", "create", "patch", "update"],
        },
        { apiGroups: ["", "events.k8s.io"], resources: ["events"], verbs: ["create", "patch", "update"] },
      ],
    },
    binding: {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name }],
    },
  };
}

/**
 * Creates each object, keeping one that exists already: what a cluster's start writes, which a
 * start over (a port taken) finds from its first attempt, of the same version, in the same etcd.
 */
export async function createObjects(kubeConfig: KubeConfig, objects: KubernetesObject[]): Promise<void> {
  const api = KubernetesObjectApi.makeApiClient(kubeConfig);
  for (const object of objects) {
    try {
      await api.create(object);
    } catch (err) {
      if ((err as { code?: number }).code !== 409) throw err;
    }
  }
}

/** Grants kwok its ClusterRole; run before kwok starts, so that its first watches are allowed. */
export async function grantKwok(kubeconfig: string): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  const { role, binding } = kwokRbac();
  await createObjects(kc, [role, binding]);
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
