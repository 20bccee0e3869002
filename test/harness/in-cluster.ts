/**
 * A KubeConfig loaded as a pod loads it (KubeConfig.loadFromCluster): the service account's
 * token, CA and namespace as files under `root`, the API server from KUBERNETES_SERVICE_HOST
 * and _PORT. The environment is set only while loading and restored after.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";

export function inClusterKubeConfig(
  root: string,
  pod: { token: string; ca: string; namespace: string; host: string; port: string },
): KubeConfig {
  const dir = join(root, "var/run/secrets/kubernetes.io/serviceaccount");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "token"), pod.token);
  writeFileSync(join(dir, "ca.crt"), pod.ca);
  writeFileSync(join(dir, "namespace"), pod.namespace);
  const env = { KUBERNETES_SERVICE_HOST: pod.host, KUBERNETES_SERVICE_PORT: pod.port };
  const before = Object.fromEntries(Object.keys(env).map((key) => [key, process.env[key]]));
  Object.assign(process.env, env);
  try {
    const kc = new KubeConfig();
    kc.loadFromCluster(root);
    return kc;
  } finally {
    for (const [key, value] of Object.entries(before)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
}
