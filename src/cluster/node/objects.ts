/**
 * The API objects a real-node cluster needs besides its processes: RBAC for the identities
 * the node's components use, and the storage provisioner's namespace, scripts and default
 * StorageClass. Each component gets only what it needs (least privilege), by certificate
 * identity rather than system:masters.
 */
import type { KubernetesObject } from "@kubernetes/client-node";
import { multiNodeDefaults, realNodeDefaults } from "./config.ts";

/** Common names of the node's client certificates (pki.ts issues them). */
export const nodeIdentities = {
  /** The API server's client certificate towards kubelets (logs, exec, port-forward). */
  apiserverKubeletClient: "kube-apiserver-kubelet-client",
  /** Bound by the default system:node-proxier ClusterRoleBinding. */
  kubeProxy: "system:kube-proxy",
  provisioner: "mlmodel:local-path-provisioner",
} as const;

const rbac = "rbac.authorization.k8s.io/v1";
const ns = realNodeDefaults.storageNamespace;

/**
 * A volume's directory is root's and not world-writable: kubelet gives it to the pod's fsGroup
 * (group-owned, group-writable, setgid) when it mounts a `local` volume, the node-local
 * class's type (`volumeTypeAnnotation`).
 */
export const setupScript = `#!/bin/sh
# Creates a volume's directory on the node (run by local-path-provisioner's helper pod).
set -eu
mkdir -m 0770 -p "$VOL_DIR"
`;

/**
 * The provisioner's StorageClass annotation for the type of the volumes it makes: `local`
 * volumes get the pod's fsGroup from kubelet (hostPath ones, its default, do not). A class
 * shared by every node cannot be `local` (a local volume is pinned to one node).
 */
export const volumeTypeAnnotation = { defaultVolumeType: "local" } as const;
export const teardownScript = `#!/bin/sh
# Deletes a volume's directory from the node when its PersistentVolume is released.
set -eu
rm -rf "$VOL_DIR"
`;

export function realNodeObjects(): KubernetesObject[] {
  return [
    // The API server calls kubelets (logs, exec, port-forward, stats) with its own client
    // certificate; kubelet asks the API server (webhook authorization) whether that is allowed.
    {
      apiVersion: rbac,
      kind: "ClusterRoleBinding",
      metadata: { name: "mlmodel:kube-apiserver-kubelet-client" },
      roleRef: {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        name: "system:kubelet-api-admin",
      },
      subjects: [
        { apiGroup: "rbac.authorization.k8s.io", kind: "User", name: nodeIdentities.apiserverKubeletClient },
      ],
    } as KubernetesObject,
    {
      apiVersion: "v1",
      kind: "Namespace",
      // Its helper pods mount host paths: only the privileged level admits them.
      metadata: {
        name: ns,
        labels: {
          "pod-security.kubernetes.io/enforce": "privileged",
          "app.kubernetes.io/managed-by": "mlmodel-cluster",
        },
      },
    },
    {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: "local-path-provisioner", namespace: ns },
      automountServiceAccountToken: false,
    } as KubernetesObject,
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "local-path-config", namespace: ns },
      data: { setup: setupScript, teardown: teardownScript },
    } as KubernetesObject,
    {
      apiVersion: rbac,
      kind: "ClusterRole",
      metadata: { name: nodeIdentities.provisioner },
      rules: [
        { apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch"] },
        {
          apiGroups: [""],
          resources: ["persistentvolumeclaims"],
          verbs: ["get", "list", "watch", "update", "patch"],
        },
        {
          apiGroups: [""],
          resources: ["persistentvolumes"],
          verbs: ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        { apiGroups: ["", "events.k8s.io"], resources: ["events"], verbs: ["create", "update", "patch"] },
        { apiGroups: ["storage.k8s.io"], resources: ["storageclasses"], verbs: ["get", "list", "watch"] },
      ],
    } as KubernetesObject,
    {
      apiVersion: rbac,
      kind: "ClusterRoleBinding",
      metadata: { name: nodeIdentities.provisioner },
      roleRef: {
        apiGroup: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        name: nodeIdentities.provisioner,
      },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: nodeIdentities.provisioner }],
    } as KubernetesObject,
    // Helper pods live in the provisioner's own namespace only.
    {
      apiVersion: rbac,
      kind: "Role",
      metadata: { name: "local-path-provisioner", namespace: ns },
      rules: [{ apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch", "create", "delete"] }],
    } as KubernetesObject,
    {
      apiVersion: rbac,
      kind: "RoleBinding",
      metadata: { name: "local-path-provisioner", namespace: ns },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "local-path-provisioner" },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: nodeIdentities.provisioner }],
    } as KubernetesObject,
    {
      apiVersion: "storage.k8s.io/v1",
      kind: "StorageClass",
      metadata: {
        name: realNodeDefaults.storageClass,
        annotations: { "storageclass.kubernetes.io/is-default-class": "true", ...volumeTypeAnnotation },
      },
      provisioner: realNodeDefaults.provisionerName,
      // The volume is made on the node where its first pod is scheduled.
      volumeBindingMode: "WaitForFirstConsumer",
      reclaimPolicy: "Delete",
    } as KubernetesObject,
  ];
}

/**
 * A multi-node cluster's objects: the one node's, and a second StorageClass whose volumes every
 * node mounts at once (ReadWriteMany). The default class stays node-local (ReadWriteOnce).
 */
export function multiNodeObjects(): KubernetesObject[] {
  return [
    ...realNodeObjects(),
    {
      apiVersion: "storage.k8s.io/v1",
      kind: "StorageClass",
      metadata: { name: multiNodeDefaults.sharedStorageClass },
      provisioner: realNodeDefaults.provisionerName,
      volumeBindingMode: "WaitForFirstConsumer",
      reclaimPolicy: "Delete",
    } as KubernetesObject,
  ];
}
