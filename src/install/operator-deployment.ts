/**
 * The operator as pods: its Deployment (leader-elected replicas at the restricted Pod Security
 * level, as its own ServiceAccount), the metrics Service and a PodDisruptionBudget. dist/install.yaml
 * (scripts/gen-install.ts) and `mlmodel install --in-cluster` both install these objects.
 */
import { operatorName } from "../operator/names.ts";
import { defaultOperatorConfig } from "../operator/plan.ts";
import type { KubeObject } from "../runtime/index.ts";
import { defaultOperatorNamespace } from "./manifests.ts";

export const metricsPort = 8080;
export const healthPort = 8081;
/** The project's image: the operator, and its `mlmodel download` for the download Jobs. */
export const defaultOperatorImage = defaultOperatorConfig.downloaderImage;

/** Labels of the manager's pods; the Deployment selector and the metrics Service use them. */
export const managerSelector = {
  "app.kubernetes.io/name": operatorName,
  "app.kubernetes.io/component": "manager",
};
const managerLabels = { ...managerSelector, "app.kubernetes.io/part-of": "mlmodel-operator" };

/** The `restricted` Pod Security level, plus a read-only root filesystem. */
export const containerSecurityContext = {
  allowPrivilegeEscalation: false,
  capabilities: { drop: ["ALL"] },
  readOnlyRootFilesystem: true,
  runAsNonRoot: true,
};
export const podSecurityContext = { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } };

export interface OperatorDeploymentOptions {
  namespace?: string;
  image?: string;
  /** Several replicas elect a leader; one replica does not need to (default 2). */
  replicas?: number;
  /** Namespaces whose MLModels the operator manages (its --namespace flags); empty: all. */
  watchNamespaces?: readonly string[];
}

export function managerDeployment(options: OperatorDeploymentOptions = {}): KubeObject {
  const namespace = options.namespace ?? defaultOperatorNamespace;
  const image = options.image ?? defaultOperatorImage;
  const replicas = options.replicas ?? 2;
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: operatorName, namespace, labels: managerLabels },
    spec: {
      // With two, one leads (holds the Lease) and the other has warm caches and takes over.
      replicas,
      selector: { matchLabels: managerSelector },
      template: {
        metadata: { labels: managerLabels },
        spec: {
          serviceAccountName: operatorName,
          securityContext: podSecurityContext,
          terminationGracePeriodSeconds: 30,
          // Spread the replicas so one node going away does not take both.
          affinity: {
            podAntiAffinity: {
              preferredDuringSchedulingIgnoredDuringExecution: [
                {
                  weight: 100,
                  podAffinityTerm: {
                    topologyKey: "kubernetes.io/hostname",
                    labelSelector: { matchLabels: managerSelector },
                  },
                },
              ],
            },
          },
          containers: [
            {
              name: "manager",
              image,
              args: [
                "operator",
                ...(replicas > 1 ? ["--leader-elect"] : []),
                `--metrics-bind-address=:${metricsPort}`,
                `--health-probe-bind-address=:${healthPort}`,
                "--log-format=json",
                "--log-level=info",
                // The download Jobs run the same image as the operator, whichever image that is.
                `--downloader-image=${image}`,
                ...(options.watchNamespaces ?? []).map((ns) => `--namespace=${ns}`),
              ],
              env: [{ name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } }],
              ports: [
                { name: "metrics", containerPort: metricsPort, protocol: "TCP" },
                { name: "health", containerPort: healthPort, protocol: "TCP" },
              ],
              livenessProbe: {
                httpGet: { path: "/healthz", port: "health" },
                initialDelaySeconds: 15,
                periodSeconds: 20,
              },
              // Ready once every cache has synced; a standby replica is ready too.
              readinessProbe: { httpGet: { path: "/readyz", port: "health" }, periodSeconds: 10 },
              resources: { requests: { cpu: "100m", memory: "128Mi" }, limits: { memory: "512Mi" } },
              securityContext: containerSecurityContext,
              // The root filesystem is read-only; Node and libraries may still want a /tmp.
              volumeMounts: [{ name: "tmp", mountPath: "/tmp" }],
            },
          ],
          volumes: [{ name: "tmp", emptyDir: { sizeLimit: "64Mi" } }],
        },
      },
    },
  };
}

export function metricsService(namespace = defaultOperatorNamespace): KubeObject {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: `${operatorName}-metrics`, namespace, labels: managerLabels },
    spec: {
      type: "ClusterIP",
      selector: managerSelector,
      ports: [{ name: "metrics", port: metricsPort, targetPort: "metrics", protocol: "TCP" }],
    },
  };
}

export function disruptionBudget(namespace = defaultOperatorNamespace): KubeObject {
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: { name: operatorName, namespace, labels: managerLabels },
    spec: { minAvailable: 1, selector: { matchLabels: managerSelector } },
  };
}

/** The Deployment, its metrics Service and, with more than one replica, its disruption budget. */
export function operatorPodManifests(options: OperatorDeploymentOptions = {}): KubeObject[] {
  const namespace = options.namespace ?? defaultOperatorNamespace;
  return [
    managerDeployment(options),
    metricsService(namespace),
    // minAvailable 1 of 1 would block every node drain.
    ...((options.replicas ?? 2) > 1 ? [disruptionBudget(namespace)] : []),
  ];
}
