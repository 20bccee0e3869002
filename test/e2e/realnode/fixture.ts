/**
 * What the real-node e2e files share: the run's real-node cluster, the operator as a host
 * process under its own RBAC with the locally built project image as its download image, a
 * namespace at the restricted Pod Security level, the sample model trained in a pod of the
 * MLServer image, and an HTTPS file server on the node's bridge whose CA the download Job trusts
 * through the model's credentials Secret (`ca.crt`, docs/downloader.md).
 */
import { join } from "node:path";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { recipeFor } from "../../../src/images/index.ts";
import {
  inferV2,
  type ModelFileServer,
  type SampleModel,
  type ServiceEndpoint,
  serviceEndpoint,
  startModelFileServer,
  type TrainOptions,
  trainSampleModel,
} from "../../../src/images/sample-model.ts";
import { builtinKinds } from "../../../src/runtime/index.ts";
import { OperatorProcess, operatorKubeconfig, waitReady } from "../../chaos/operator-process.ts";
import { kubeConfig, waitFor } from "../../harness/cluster.ts";
import { type RealNodeCluster, useRealNodeCluster } from "../../harness/realnode.ts";
import { type OperatorTestBed, operatorTestBed, removeTestBed } from "../operator/helpers.ts";
import { waitModel } from "../rollout/canary-helpers.ts";

/** The Secret that carries the file server's CA for the download Job. */
export const caSecretName = "model-files-ca";

export interface RealNodeBed extends OperatorTestBed {
  cluster: RealNodeCluster;
  files: ModelFileServer;
}

export async function realNodeBed(
  prefix: string,
  options: { bytesPerSecond?: number } = {},
): Promise<RealNodeBed> {
  const cluster = await useRealNodeCluster();
  const bed = await operatorTestBed(prefix, { downloaderImage: recipeFor("mlmodel").ref });
  const files = await startModelFileServer({ host: cluster.nodeIp, bytesPerSecond: options.bytesPerSecond });
  return { ...bed, cluster, files };
}

export async function removeRealNodeBed(bed: Partial<RealNodeBed>): Promise<void> {
  await bed.files?.stop();
  await removeTestBed(bed);
}

/**
 * The operator as a process of its own (one a test can SIGKILL), under the operator's own
 * ServiceAccount, watching the bed's namespace, logging into `dir`; resolves once its caches synced.
 */
export async function startOperatorProcess(bed: RealNodeBed, dir: string): Promise<OperatorProcess> {
  const op = await OperatorProcess.start({
    kubeconfig: await operatorKubeconfig(bed.admin, kubeConfig(), dir),
    namespace: bed.ns.name,
    logFile: join(dir, "operator.log"),
    downloaderImage: recipeFor("mlmodel").ref,
  });
  await waitReady(op);
  return op;
}

/** The file server's CA as the Secret the model's credentialsSecretRef names. */
export async function applyCaSecret(bed: RealNodeBed): Promise<void> {
  await bed.admin.apply(
    builtinKinds.Secret,
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: caSecretName, namespace: bed.ns.name },
      stringData: { "ca.crt": bed.files.ca },
    },
    { fieldManager: "e2e", force: true },
  );
}

/** Trains the sample model in a pod of the bed's namespace and serves it at `/<file>`. */
export async function publishSample(
  bed: RealNodeBed,
  file: string,
  options: Omit<TrainOptions, "namespace"> = {},
): Promise<SampleModel & { uri: string }> {
  const model = await trainSampleModel(kubeConfig(), { namespace: bed.ns.name, ...options });
  return { ...model, uri: bed.files.add(file, model.archive) };
}

/** An MLModel serving `model` from its URI with its checksum, through the built-in MLServer runtime. */
export function sklearnModel(
  name: string,
  model: { uri: string; sha256: string },
  spec: Partial<MLModelSpec> = {},
): MLModel {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: { name },
    spec: {
      ...spec,
      model: {
        uri: model.uri,
        format: "sklearn",
        sha256: model.sha256,
        credentialsSecretRef: { name: caSecretName },
        ...spec.model,
      },
      storage: { size: "64Mi", ...spec.storage },
    },
  } as MLModel;
}

export async function applyModel(bed: RealNodeBed, model: MLModel): Promise<void> {
  await bed.admin.apply(
    mlModelKind,
    { ...model, metadata: { ...model.metadata, namespace: bed.ns.name } },
    { fieldManager: "e2e", force: true },
  );
}

/** Where the model's status.url is served, reached through the Service's ClusterIP on the bed's cluster. */
export async function endpointOf(bed: RealNodeBed, model: MLModel): Promise<ServiceEndpoint> {
  const url = model.status?.url;
  if (!url)
    throw new Error(`MLModel ${model.metadata.name} has no status.url: ${JSON.stringify(model.status)}`);
  const config = new KubeConfig();
  config.loadFromFile(bed.cluster.kubeconfig);
  return serviceEndpoint(config.makeApiClient(CoreV1Api), url);
}

/**
 * The first answer through the Service. kube-proxy programs the ClusterIP shortly after the
 * endpoints appear, so the first few connections may be refused: retried until one answers.
 */
export async function firstAnswer(endpoint: ServiceEndpoint, model: SampleModel) {
  return waitFor(
    "the model's Service to answer",
    async () => {
      const answer = await inferV2(endpoint, model.name, model.inputs);
      return answer.status === 200 ? answer : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

export interface StatusRecorder {
  /** Every status the model had, in the order the API server reported them. */
  statuses: NonNullable<MLModel["status"]>[];
  /**
   * Stops watching; given the resourceVersion of a model read elsewhere (a poll that saw it
   * Ready), first waits until the watch has delivered that version too, up to a minute: the
   * poll can see a write before the watch does, and stopping then loses its status.
   */
  stop(seenResourceVersion?: string): Promise<void>;
}

/**
 * Watches the model and keeps each status it goes through (a poll could miss a phase that
 * lasts less than its interval; a watch sees every write).
 */
export function recordStatuses(bed: RealNodeBed, name: string): StatusRecorder {
  const statuses: NonNullable<MLModel["status"]>[] = [];
  const seen = new Set<string>();
  const abort = new AbortController();
  const loop = (async () => {
    let resourceVersion: string | undefined;
    while (!abort.signal.aborted) {
      try {
        for await (const event of bed.admin.watch<MLModel>(
          mlModelKind,
          {
            namespace: bed.ns.name,
            fieldSelector: `metadata.name=${name}`,
            ...(resourceVersion ? { resourceVersion } : {}),
            allowWatchBookmarks: true,
          },
          abort.signal,
        )) {
          resourceVersion = event.object.metadata.resourceVersion;
          if (resourceVersion) seen.add(resourceVersion);
          if (event.type !== "BOOKMARK" && event.object.status) statuses.push(event.object.status);
        }
      } catch (err) {
        if (!abort.signal.aborted)
          console.error(`# status watch of ${name} restarts: ${(err as Error).message}`);
      }
    }
  })();
  return {
    statuses,
    async stop(seenResourceVersion) {
      if (seenResourceVersion) {
        await waitFor(
          `the status watch of ${name} to deliver resourceVersion ${seenResourceVersion}`,
          async () => seen.has(seenResourceVersion),
        ).catch((err: Error) => console.error(`# ${err.message}`));
      }
      abort.abort();
      await loop;
    },
  };
}

/** Waits until `done(model)`, whatever generation its status is of; a timeout says what the status last was. */
export function waitForModel(
  bed: RealNodeBed,
  name: string,
  what: string,
  done: (model: MLModel) => boolean | Promise<boolean>,
  timeoutMs = 600_000,
): Promise<MLModel> {
  return waitModel(bed.admin, bed.ns.name, name, what, done, timeoutMs, {
    anyGeneration: true,
    intervalMs: 500,
  });
}
