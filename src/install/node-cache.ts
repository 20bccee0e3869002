/**
 * The node cache's objects (docs/model-cache.md): the agent as a DaemonSet in the operator's
 * namespace at the restricted Pod Security level, its identity and least rights, and the
 * Service with `internalTrafficPolicy: Local` that gives every pod its own node's agent.
 * `mlmodel install`, dist/install.yaml, the Helm chart (files/node-cache.yaml, generated from
 * these objects) and the tests (installNodeCache) all install these same objects.
 */
import {
  nodeCacheAgentCommand,
  nodeCacheComponentLabels,
  nodeCachePort,
  nodeCacheServiceName,
} from "../nodecache/contract.ts";
import { builtinKinds, type KubeClient, type KubeObject, type ResourceKind } from "../runtime/index.ts";
import { defaultOperatorNamespace } from "./manifests.ts";
import { containerSecurityContext, defaultOperatorImage, podSecurityContext } from "./operator-deployment.ts";
import { partOf } from "./policies.ts";

export interface NodeCacheOptions {
  /** The operator's namespace: the agents run there and the operator looks for their Service there. */
  namespace?: string;
  /** The operator's image: its `mlmodel node-cache` is the agent. */
  image?: string;
  /** Bytes each node's cache may hold, as a quantity (e.g. 50Gi): the emptyDir's sizeLimit too. */
  budget?: string;
}

export const nodeCacheDefaults = {
  budget: "50Gi",
  /** Where the agent keeps its entries inside its pod (the emptyDir). */
  cacheDir: "/var/cache/mlmodel",
  resources: { requests: { cpu: "50m", memory: "64Mi" }, limits: { memory: "512Mi" } },
} as const;

/** The agents' ServiceAccount, Roles and Service share the Service's name. */
const name = nodeCacheServiceName;

/**
 * The name of the agents' cluster-wide role and binding: one per namespace the node cache is
 * installed in, so two installs (two Helm releases, a namespaced install beside another) do
 * not claim the same cluster-scoped objects.
 */
export function clusterScopedName(namespace: string): string {
  return `${name}-${namespace}`;
}
const labels = { ...nodeCacheComponentLabels, ...partOf };

/**
 * The agent's rights, with why (docs/install.md's verb table says the same):
 * - in its namespace, EndpointSlices list/watch: its peers are the endpoints of its Service;
 * - in its namespace, ConfigMaps get/create/patch/update: its state ConfigMap, which the
 *   operator and `mlmodel describe` read;
 * - cluster-wide, pods list/watch, read as metadata only with a field selector on its own node:
 *   a version a pod on its node serves (its cache-key label) is never evicted. Pods of every
 *   namespace land on a node, so no namespaced Role could grant it; metadata only, so no pod
 *   spec or env ever reaches the agent (RBAC cannot tell the two lists apart: the agent's code
 *   asks for metadata).
 */
export const nodeCacheRules = {
  namespaced: [
    { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
    { apiGroups: [""], resources: ["configmaps"], verbs: ["create", "get", "patch", "update"] },
  ],
  cluster: [{ apiGroups: [""], resources: ["pods"], verbs: ["list", "watch"] }],
};

/**
 * What the operator itself needs of the node cache, in its own namespace: to find the node
 * cache's Service at start (a get of that one Service, pinned by name), and to read the agents'
 * state ConfigMaps (list/watch; a cluster-wide install's ConfigMap rights cover it already).
 */
export const operatorNodeCacheRules = [
  { apiGroups: [""], resources: ["services"], resourceNames: [nodeCacheServiceName], verbs: ["get"] },
  { apiGroups: [""], resources: ["configmaps"], verbs: ["list", "watch"] },
];

export const operatorNodeCacheRoleName = "mlmodel-operator-node-cache";

/** The operator's Role and RoleBinding for the node cache (part of its RBAC, node cache or not). */
export function operatorNodeCacheRbac(namespace = defaultOperatorNamespace, operator: string): KubeObject[] {
  return [
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name: operatorNodeCacheRoleName, namespace, labels: partOf },
      rules: operatorNodeCacheRules,
    } as KubeObject,
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: operatorNodeCacheRoleName, namespace, labels: partOf },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: operatorNodeCacheRoleName },
      subjects: [{ kind: "ServiceAccount", name: operator, namespace }],
    } as KubeObject,
  ];
}

/** The agents' DaemonSet, identity, rights and Service. */
export function nodeCacheManifests(options: NodeCacheOptions = {}): KubeObject[] {
  const namespace = options.namespace ?? defaultOperatorNamespace;
  const subject = { kind: "ServiceAccount", name, namespace };
  return [
    {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name, namespace, labels },
      automountServiceAccountToken: false,
    } as KubeObject,
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name, namespace, labels },
      rules: nodeCacheRules.namespaced,
    } as KubeObject,
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name, namespace, labels },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [subject],
    } as KubeObject,
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name: clusterScopedName(namespace), labels },
      rules: nodeCacheRules.cluster,
    } as KubeObject,
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: clusterScopedName(namespace), labels },
      roleRef: {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        name: clusterScopedName(namespace),
      },
      subjects: [subject],
    } as KubeObject,
    nodeCacheService(namespace),
    nodeCacheDaemonSet(options),
  ];
}

/** "My node's agent" at one ClusterIP: Local traffic policy never leaves the caller's node. */
export function nodeCacheService(namespace = defaultOperatorNamespace): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name, namespace, labels },
    spec: {
      type: "ClusterIP",
      selector: { ...nodeCacheComponentLabels },
      internalTrafficPolicy: "Local",
      ports: [
        { name: "http", port: nodeCachePort, targetPort: "http", protocol: "TCP", appProtocol: "http" },
      ],
    },
  } as KubeObject;
}

export function nodeCacheDaemonSet(options: NodeCacheOptions = {}): KubeObject {
  const namespace = options.namespace ?? defaultOperatorNamespace;
  const budget = options.budget ?? nodeCacheDefaults.budget;
  const fieldEnv = (envName: string, fieldPath: string) => ({
    name: envName,
    valueFrom: { fieldRef: { fieldPath } },
  });
  return {
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: { name, namespace, labels },
    spec: {
      selector: { matchLabels: { ...nodeCacheComponentLabels } },
      // One node at a time: a replaced agent starts empty and refills from its peers.
      updateStrategy: { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 1 } },
      template: {
        metadata: { labels },
        spec: {
          serviceAccountName: name,
          // It lists its peers and the pods on its node, and writes its state ConfigMap.
          automountServiceAccountToken: true,
          securityContext: podSecurityContext,
          terminationGracePeriodSeconds: 30,
          // On every node that may run model pods: tainted nodes included.
          tolerations: [{ operator: "Exists" }],
          containers: [
            {
              name: "agent",
              image: options.image ?? defaultOperatorImage,
              command: [...nodeCacheAgentCommand],
              args: [
                "--dir",
                nodeCacheDefaults.cacheDir,
                "--budget",
                budget,
                "--port",
                String(nodeCachePort),
              ],
              env: [fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_NAMESPACE", "metadata.namespace")],
              ports: [{ name: "http", containerPort: nodeCachePort, protocol: "TCP" }],
              readinessProbe: { httpGet: { path: "/healthz", port: "http" }, periodSeconds: 5 },
              livenessProbe: {
                httpGet: { path: "/healthz", port: "http" },
                periodSeconds: 20,
                failureThreshold: 3,
              },
              resources: structuredClone(nodeCacheDefaults.resources),
              securityContext: containerSecurityContext,
              volumeMounts: [
                { name: "cache", mountPath: nodeCacheDefaults.cacheDir },
                { name: "tmp", mountPath: "/tmp" },
              ],
            },
          ],
          volumes: [
            // The node's disk, bounded: survives the agent's restarts, not its pod's replacement.
            { name: "cache", emptyDir: { sizeLimit: budget } },
            { name: "tmp", emptyDir: { sizeLimit: "64Mi" } },
          ],
        },
      },
    },
  } as KubeObject;
}

const nodeCacheKinds: Record<string, ResourceKind> = {
  ServiceAccount: builtinKinds.ServiceAccount,
  Role: builtinKinds.Role,
  RoleBinding: builtinKinds.RoleBinding,
  ClusterRole: builtinKinds.ClusterRole,
  ClusterRoleBinding: builtinKinds.ClusterRoleBinding,
  Service: builtinKinds.Service,
  DaemonSet: builtinKinds.DaemonSet,
};

/**
 * Installs (server-side apply) the node cache into a cluster: the objects nodeCacheManifests
 * returns, identity and rights first, the DaemonSet last. What tests on real nodes call; an
 * operator started afterwards finds the node cache (or pass it the Service's URL).
 */
export async function installNodeCache(
  client: KubeClient,
  options: NodeCacheOptions & { signal?: AbortSignal; fieldManager?: string } = {},
): Promise<KubeObject[]> {
  const applied: KubeObject[] = [];
  for (const obj of nodeCacheManifests(options)) {
    const kind = nodeCacheKinds[obj.kind]!;
    applied.push(
      await client.apply(kind, obj, {
        fieldManager: options.fieldManager ?? "mlmodel-install",
        force: true,
        signal: options.signal,
      }),
    );
  }
  return applied;
}
