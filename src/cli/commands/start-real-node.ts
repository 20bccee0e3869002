/**
 * `mlmodel start --real-node`: the sample scikit-learn model on real pods. The local cluster
 * gets a real node (or the configured cluster's real node is used), the images it runs are
 * built without a registry and imported, the model is trained in a pod of the MLServer image and
 * served over HTTPS from this machine to the node's download Job, and once the model is Ready a
 * real prediction comes back through its Service: the curl command that asks for it is printed.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CoreV1Api, KubeConfig, type V1Node } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import type { MLModel } from "../../api/mlmodel.ts";
import {
  status as clusterStatus,
  kubeconfigPath,
  kwokTaint,
  loadImageIfChanged,
  realNodeDefaults,
  up,
} from "../../cluster/index.ts";
import { type EnsuredImage, ensureImage, ensureImagePrerequisites, imageNames } from "../../images/index.ts";
import {
  curlCommand,
  inferV2,
  type ModelFileServer,
  type SampleModel,
  serviceEndpoint,
  startModelFileServer,
  trainSampleModel,
} from "../../images/sample-model.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";

export const realNodeSample = "sklearn-iris.yaml";
const samplesDir = join(import.meta.dirname, "..", "..", "..", "samples");

/** The objects of one file under samples/. */
export function readSample(file: string): KubeObject[] {
  return parseAllDocuments(readFileSync(join(samplesDir, file), "utf8")).map((d) => d.toJS() as KubeObject);
}

const say = (line: string) => console.log(`  ${line}`);

/** The cluster's real node (labelled by `mlmodel cluster up --real-node`), or undefined. */
async function findRealNode(kc: KubeConfig): Promise<V1Node | undefined> {
  const selector = Object.entries(realNodeDefaults.nodeLabel)
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
  const nodes = await kc.makeApiClient(CoreV1Api).listNode({ labelSelector: selector });
  return nodes.items[0];
}

function internalIp(node: V1Node): string {
  const ip = node.status?.addresses?.find((a) => a.type === "InternalIP")?.address;
  if (!ip) throw new CliError(`the real node ${node.metadata?.name} reports no InternalIP`);
  return ip;
}

/** Builds (or takes from the cache) every image the sample runs: the project's and MLServer's. */
async function ensureImages(): Promise<EnsuredImage[]> {
  console.log(
    "building the images without a registry (cached; the first build takes 15-25 minutes on 2 cores, see docs/images.md)",
  );
  await ensureImagePrerequisites(say);
  const built = await Promise.all(
    imageNames.map((name) => ensureImage(name, (line) => say(`${name}: ${line}`))),
  );
  return built;
}

export interface RealNodeCluster {
  kc: KubeConfig;
  kubeconfig: string;
  nodeIp: string;
}

/**
 * The configured cluster's real node (its images must be there already), or the local
 * control plane in `dir` with a real node: started when none runs, its images imported when
 * they are missing.
 */
export async function realNodeCluster(
  configured: { kc: KubeConfig; path: string } | undefined,
  dir: string,
): Promise<RealNodeCluster> {
  if (configured) {
    const node = await findRealNode(configured.kc);
    if (!node)
      throw new CliError(
        `the cluster in ${configured.path} has no real node (a Node labelled mlmodel.dev/real-node=true); drop --kubeconfig to use the local one`,
      );
    const present = new Set(node.status?.images?.flatMap((i) => i.names ?? []) ?? []);
    const missing = (await ensureImages()).filter(({ ref }) => !present.has(ref));
    if (missing.length > 0)
      throw new CliError(
        `the real node lacks ${missing.map(({ ref }) => ref).join(", ")}: import ${missing.length > 1 ? "them" : "it"} with mlmodel cluster load-image ${missing.map(({ archive }) => archive).join(" ")} --dir DIR`,
      );
    return { kc: configured.kc, kubeconfig: configured.path, nodeIp: internalIp(node) };
  }
  const running = await clusterStatus(dir).catch(() => undefined);
  if (running && !running.state.realNode)
    throw new CliError(
      `the local control plane in ${dir} has no real node: stop it (mlmodel cluster down) and run npm start -- --real-node again`,
    );
  const images = await ensureImages();
  const kc = new KubeConfig();
  if (running?.components.every((c) => c.healthy)) {
    console.log(`using the local control plane and its real node in ${dir}`);
    kc.loadFromFile(kubeconfigPath(dir));
    // By digest: an image rebuilt under the same name (an edit under src/) is imported again.
    for (const { ref, archive, record } of images)
      if (await loadImageIfChanged(dir, { ref, archive, digest: record.digest }))
        say(`imported ${ref} (${record.digest.slice(0, 19)}) into the real node`);
  } else {
    console.log(
      `starting the local control plane with a real node in ${dir} (Linux, root; see docs/real-node.md)`,
    );
    await up({ dir, realNode: true, images: images.map(({ archive }) => archive), progress: say });
    kc.loadFromFile(kubeconfigPath(dir));
  }
  return { kc, kubeconfig: kubeconfigPath(dir), nodeIp: realNodeDefaults.nodeIp };
}

export interface PublishedSample {
  model: SampleModel;
  files: ModelFileServer;
  /** The sample's objects (a Secret with the file server's CA, the MLModel), ready to apply. */
  objects: [Record<string, unknown>, MLModel];
}

/**
 * Trains the sample model in a pod of `namespace`, serves its archive over HTTPS on the
 * node's address, and fills samples/sklearn-iris.yaml in with its URI, checksum and CA Secret.
 */
export async function publishSample(cluster: RealNodeCluster, namespace: string): Promise<PublishedSample> {
  const sample = readSample(realNodeSample).find((d) => d.kind === "MLModel") as MLModel;
  say("training the sample scikit-learn model in a pod of the MLServer image");
  const model = await trainSampleModel(cluster.kc, {
    namespace,
    name: sample.spec.model.name ?? sample.metadata.name!,
  });
  const files = await startModelFileServer({ host: cluster.nodeIp });
  const uri = files.add(`${sample.metadata.name}.tgz`, model.archive);
  say(`serving ${uri} (sha256 ${model.sha256}) from this machine`);
  const caSecret = sample.spec.model.credentialsSecretRef!.name;
  const secret = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: caSecret, namespace },
    stringData: { "ca.crt": files.ca },
  };
  const mlmodel: MLModel = {
    ...sample,
    metadata: { ...sample.metadata, namespace },
    spec: { ...sample.spec, model: { ...sample.spec.model, uri, sha256: model.sha256 } },
  };
  return { model, files, objects: [secret, mlmodel] };
}

/**
 * Sends the sample's rows to the Ready model through its Service and checks the answer is what
 * scikit-learn predicted. kube-proxy programs the ClusterIP shortly after the endpoints appear,
 * so the first connections are retried for a while. Returns the curl command that asks the same.
 */
export async function firstPrediction(
  kc: KubeConfig,
  url: string,
  model: SampleModel,
  signal: AbortSignal,
): Promise<string> {
  const endpoint = await serviceEndpoint(kc.makeApiClient(CoreV1Api), url);
  const deadline = Date.now() + 60_000;
  let last = "";
  while (!signal.aborted) {
    const answer = await inferV2(endpoint, model.name, model.inputs).catch((err: Error) => ({
      status: 0,
      body: err.message,
      data: undefined,
    }));
    if (answer.status === 200) {
      const same = JSON.stringify(answer.data) === JSON.stringify(model.predictions);
      console.log(
        `\nprediction through the Service: ${JSON.stringify(answer.data)} (${same ? "what scikit-learn predicted" : `scikit-learn predicted ${JSON.stringify(model.predictions)}`})`,
      );
      if (!same) throw new CliError("the served model answered differently from the one trained");
      return curlCommand(url, endpoint, model.name, model.inputs);
    }
    last = `HTTP ${answer.status}: ${answer.body.slice(0, 200)}`;
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new CliError(`the model is Ready but its Service did not answer (${last})`);
}

/**
 * Whether the model's serving pods run on kwok nodes, where pods are simulated: kwok marks them
 * Running and Ready, but no container runs.
 */
export async function servedByKwok(client: KubeClient, namespace: string, model: string): Promise<boolean> {
  const pods = await client.list<KubeObject & { spec?: { nodeName?: string } }>(builtinKinds.Pod, {
    namespace,
    labelSelector: `serving.mlmodel.dev/model=${model},app.kubernetes.io/component=server`,
  });
  for (const pod of pods.items) {
    const nodeName = pod.spec?.nodeName;
    if (!nodeName) continue;
    const node = await client.get(builtinKinds.Node, { name: nodeName });
    if (node?.metadata.annotations?.[kwokTaint.key] === kwokTaint.value) return true;
  }
  return false;
}
