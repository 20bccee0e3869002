/**
 * `mlmodel start` (`npm start`): the first command a user runs. Uses the cluster in
 * --kubeconfig/KUBECONFIG, or brings up the local control plane; installs CRDs, runtimes and
 * RBAC; runs the operator in this process; applies a sample model; shows its status live until
 * it is Ready; then keeps the operator running until Ctrl-C.
 *
 * On kwok nodes (the default local control plane) pods are simulated, and it says so. With
 * --real-node (start-real-node.ts) a real scikit-learn model is downloaded and served by real
 * pods, and the curl command that returns its prediction is printed.
 */
import { KubeConfig } from "@kubernetes/client-node";
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import { status as clusterStatus, defaultClusterDir, kubeconfigPath, up } from "../../cluster/index.ts";
import { recipeFor } from "../../images/index.ts";
import { install } from "../../install/install.ts";
import { childNames } from "../../operator/names.ts";
import { createOperator } from "../../operator/run.ts";
import { builtinKinds, type KubeClient, type KubeObject, shutdownSignal } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { checkedLevel, humanLogger } from "../log.ts";
import { parseCommandLine } from "../views/session.ts";
import { cliClient, loadKubeConfig } from "./kubeconfig-flag.ts";
import {
  firstPrediction,
  type PublishedSample,
  publishSample,
  readSample,
  realNodeCluster,
  realNodeSample,
  servedByKwok,
} from "./start-real-node.ts";

export const summary = "start everything: local cluster (or KUBECONFIG), install, operator, a sample model";

const samples: Record<string, string> = {
  download: "mlmodel-download-then-serve.yaml",
  tfserving: "tfserving-operator.yaml",
  machinemodel: "machinemodel.yaml",
};

const help = `Usage: mlmodel start [--kubeconfig PATH] [--sample NAME | --real-node] [--namespace NS] [--exit-when-ready]

Brings up the local control plane unless a cluster is configured (--kubeconfig or KUBECONFIG),
installs the CRDs, built-in runtimes and RBAC, runs the operator, applies a sample MLModel and
shows its status until it is Ready. The operator then keeps running until Ctrl-C.

The local control plane's nodes are kwok's: pods there are simulated (no file is downloaded,
nothing serves the model's URL). --real-node runs the sample on real pods instead: the local
control plane gets a real node (Linux, root; docs/real-node.md), the images are built without
a registry (15-25 minutes the first time, docs/images.md), a scikit-learn model is trained in a
pod, served over HTTPS from this machine, downloaded by the real Job and served by MLServer,
and the curl command that returns its prediction is printed.

Flags:
  --kubeconfig PATH   use this cluster instead of the local control plane
  --sample NAME       ${Object.keys(samples).join(", ")} (default download: URL -> storage -> Job -> Deployment -> Service)
  --real-node         real pods: samples/${realNodeSample} on the cluster's real node
  --namespace NS      namespace of the sample (default default)
  --exit-when-ready   stop the operator and exit 0 once the sample is Ready (the cluster keeps
                      running); with --real-node the last line printed is the curl command

Examples:
  npm start
  sudo npm start -- --real-node --exit-when-ready
  mlmodel start --sample tfserving
  KUBECONFIG=~/.kube/config mlmodel start --exit-when-ready`;

const kinds: Record<string, typeof mlModelKind> = {
  MLModel: mlModelKind,
  Secret: builtinKinds.Secret,
  ConfigMap: builtinKinds.ConfigMap,
};

async function kubeConfigOrLocalCluster(
  path: string | undefined,
): Promise<{ kc: KubeConfig; local: boolean }> {
  const kc = new KubeConfig();
  const configured = path ?? process.env.KUBECONFIG;
  if (configured) {
    try {
      kc.loadFromFile(configured);
    } catch (err) {
      throw new CliError(`cannot load kubeconfig ${configured}: ${(err as Error).message}`);
    }
    console.log(`using the cluster in ${configured}`);
    return { kc, local: false };
  }
  const dir = defaultClusterDir();
  const running = await clusterStatus(dir).catch(() => undefined);
  if (running?.components.every((c) => c.healthy)) {
    console.log(`using the local control plane in ${dir}`);
  } else {
    console.log(`starting the local control plane in ${dir} (first run builds it: see README)`);
    await up({ dir, progress: (line) => console.log(`  ${line}`) });
  }
  kc.loadFromFile(kubeconfigPath(dir));
  return { kc, local: true };
}

const storageClassKind = {
  group: "storage.k8s.io",
  version: "v1",
  kind: "StorageClass",
  plural: "storageclasses",
  namespaced: false,
};

async function hasStorageClass(client: KubeClient): Promise<boolean> {
  return (await client.list(storageClassKind, { limit: 1 })).items.length > 0;
}

/** The local control plane has no volume provisioner: give the sample's claim a hostPath volume. */
async function provideLocalVolume(client: KubeClient, namespace: string, claim: string): Promise<void> {
  await client.apply(
    builtinKinds.PersistentVolume,
    {
      apiVersion: "v1",
      kind: "PersistentVolume",
      metadata: { name: `${namespace}-${claim}` },
      spec: {
        capacity: { storage: "20Gi" },
        accessModes: ["ReadWriteOnce"],
        hostPath: { path: `/tmp/mlmodel-local/${namespace}-${claim}` },
        claimRef: { namespace, name: claim },
      },
    },
    { fieldManager: "mlmodel-start", force: true },
  );
}

function describe(m: MLModel): string {
  const s = m.status;
  if (!s?.phase) return "waiting for the operator";
  const replicas = `${s.readyReplicas ?? 0}/${s.replicas ?? 0} ready`;
  return `${s.phase.padEnd(11)} ${replicas.padEnd(10)} ${s.reason ?? ""}: ${s.message ?? ""}`;
}

/** Polls the model until it is Ready at its generation, printing each new status line. */
async function untilReady(client: KubeClient, namespace: string, name: string, signal: AbortSignal) {
  let last = "";
  while (!signal.aborted) {
    const current = await client.get<MLModel>(mlModelKind, { namespace, name }).catch(() => undefined);
    if (current) {
      const line = describe(current);
      if (line !== last) console.log(`  ${name}: ${line}`);
      last = line;
      if (
        current.status?.phase === "Ready" &&
        current.status.observedGeneration === current.metadata.generation
      )
        return current;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  return undefined;
}

/** A kwok sample's objects, with a hostPath volume for its claim where nothing provisions one. */
async function kwokSample(client: KubeClient, file: string, namespace: string, local: boolean) {
  const objects = readSample(file);
  const model = objects.find((o) => o.kind === "MLModel") as MLModel;
  if (
    model.spec.model.uri &&
    !model.spec.model.uri.startsWith("pvc://") &&
    (local || !(await hasStorageClass(client)))
  ) {
    console.log("the cluster has no volume provisioner: providing a hostPath PersistentVolume for the model");
    await provideLocalVolume(client, namespace, childNames.storage(model.metadata.name!));
  }
  return objects;
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parseCommandLine(
    argv,
    {
      kubeconfig: { type: "string" },
      sample: { type: "string" },
      "real-node": { type: "boolean" },
      namespace: { type: "string", default: "default" },
      "exit-when-ready": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    help,
    false,
  );
  if (values.help) {
    console.log(help);
    return 0;
  }
  const realNode = values["real-node"] === true;
  if (realNode && values.sample)
    throw new CliError(`--real-node serves samples/${realNodeSample}; leave --sample out`, 2);
  const sampleFile = realNode ? realNodeSample : samples[values.sample ?? "download"];
  if (!sampleFile) {
    throw new CliError(`--sample "${values.sample}" is not one of ${Object.keys(samples).join(", ")}`, 2);
  }
  const namespace = values.namespace ?? "default";

  const configuredPath = values.kubeconfig ?? process.env.KUBECONFIG;
  const cluster = realNode
    ? await realNodeCluster(
        configuredPath
          ? { kc: loadKubeConfig(configuredPath, "set --kubeconfig"), path: configuredPath }
          : undefined,
        defaultClusterDir(),
      )
    : undefined;
  const { kc, local } = cluster
    ? { kc: cluster.kc, local: !configuredPath }
    : await kubeConfigOrLocalCluster(values.kubeconfig);
  const client = cliClient(kc);
  console.log("installing CRDs, built-in runtimes and RBAC");
  await install(client);

  const operator = await createOperator({
    kubeConfig: kc,
    // Short human lines among this command's own output; LOG_LEVEL=info or debug shows more.
    logger: humanLogger(checkedLevel(process.env.LOG_LEVEL ?? "warn", "LOG_LEVEL")),
    // The image the node has: the one built here (it is also the operator's default).
    ...(realNode ? { downloaderImage: recipeFor("mlmodel").ref } : {}),
  });
  const stop = new AbortController();
  const signal = shutdownSignal();
  signal.addEventListener("abort", () => stop.abort(), { once: true });
  const running = operator.start(stop.signal);
  console.log("operator running");

  let published: PublishedSample | undefined;
  let curl: string | undefined;
  try {
    await client.apply(
      builtinKinds.Namespace,
      { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } },
      { fieldManager: "mlmodel-start", force: true },
    );
    if (cluster) published = await publishSample(cluster, namespace);
    const objects = published
      ? (published.objects as KubeObject[])
      : await kwokSample(client, sampleFile, namespace, local);
    const name = (objects.find((o) => o.kind === "MLModel") as MLModel).metadata.name!;
    for (const obj of objects) {
      const kind = kinds[obj.kind];
      if (!kind) throw new CliError(`sample ${sampleFile} has an object of unexpected kind ${obj.kind}`);
      await client.apply(
        kind,
        { ...obj, metadata: { ...obj.metadata, namespace } },
        { fieldManager: "mlmodel-start", force: true },
      );
    }
    console.log(`applied samples/${sampleFile}: MLModel ${namespace}/${name}`);

    const ready = await untilReady(client, namespace, name, stop.signal);
    if (ready) {
      const url = ready.status?.url ?? "";
      console.log(`\n${name} is Ready at ${url}`);
      console.log(
        `  kubectl --kubeconfig ${cluster?.kubeconfig ?? configuredPath ?? kubeconfigPath(defaultClusterDir())} get mlm -n ${namespace}`,
      );
      if (published) curl = await firstPrediction(kc, url, published.model, stop.signal);
      else if (await servedByKwok(client, namespace, name))
        console.log(
          `\nIts pods run on kwok nodes, where pods are simulated: no file was downloaded and nothing serves ${url}.\nFor real pods (Linux, root): npm start -- --real-node`,
        );
    }
  } catch (err) {
    stop.abort();
    await running.catch(() => {});
    await published?.files.stop();
    throw err;
  }
  if (values["exit-when-ready"]) {
    stop.abort();
    await running;
    await published?.files.stop();
  } else if (!stop.signal.aborted) {
    console.log("the operator keeps running (and serves the model file); Ctrl-C to stop");
  }
  if (curl)
    console.log(`\nask it yourself (no cluster DNS here: --resolve gives the Service's ClusterIP):\n${curl}`);
  await running;
  await published?.files.stop();
  return 0;
}
