/**
 * What the real-node tests share: kubectl against a cluster, and pod helpers. (Whether this
 * machine can host a node is the `real-node` prerequisite's to say: test/harness/prerequisites.)
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { CoreV1Api, KubeConfig, type V1Container, type V1Pod, type V1PodSpec } from "@kubernetes/client-node";
import { ensureBinaries } from "../../../src/cluster/index.ts";
import { waitFor } from "../../harness/cluster.ts";

/** Real-node tests of one run (or of several engineers) take turns on the machine. */
export const nodeLockWaitMs = 30 * 60_000;

const run = promisify(execFile);

export interface Kubectl {
  (...args: string[]): Promise<string>;
  kubeconfig: string;
}

export async function kubectlFor(kubeconfig: string): Promise<Kubectl> {
  const { kubectl: binary } = await ensureBinaries();
  const kubectl = (async (...args: string[]) => {
    const { stdout } = await run(binary, ["--kubeconfig", kubeconfig, ...args], {
      maxBuffer: 16 * 1024 * 1024,
      timeout: 120_000,
    });
    return stdout;
  }) as Kubectl;
  kubectl.kubeconfig = kubeconfig;
  return kubectl;
}

export function coreFor(kubeconfig: string): CoreV1Api {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return kc.makeApiClient(CoreV1Api);
}

export async function waitForPod(
  core: CoreV1Api,
  namespace: string,
  name: string,
  what: string,
  done: (pod: V1Pod) => boolean,
): Promise<V1Pod> {
  return waitFor(
    `pod ${namespace}/${name} ${what}`,
    async () => {
      const pod = await core.readNamespacedPod({ name, namespace });
      return done(pod) ? pod : undefined;
    },
    { timeoutMs: 180_000, intervalMs: 250 },
  );
}

export const isReady = (pod: V1Pod) =>
  pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") === true;
export const isFinished = (pod: V1Pod) => pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed";

/** A pod of one container (image never pulled) on the real node, running `script` with sh. */
export function busyboxPod(
  name: string,
  image: string,
  script: string | string[],
  extra: {
    labels?: Record<string, string>;
    restartPolicy?: string;
    container?: Partial<V1Container>;
    spec?: Partial<V1PodSpec>;
  } = {},
): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, labels: extra.labels },
    spec: {
      restartPolicy: extra.restartPolicy ?? "Never",
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          name: "main",
          image,
          imagePullPolicy: "Never",
          command: typeof script === "string" ? ["sh", "-c", script] : script,
          ...extra.container,
        },
      ],
      ...extra.spec,
    },
  };
}
