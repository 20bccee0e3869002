/**
 * `mlmodel start` (`npm start`): the first command a user runs. Uses the cluster in
 * --kubeconfig/KUBECONFIG, or brings up the local control plane; installs CRDs, runtimes and
 * RBAC; runs the operator in this process; applies a sample model; shows its status live until
 * it is Ready; then keeps the operator running until Ctrl-C.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import pino from "pino";
import { parseAllDocuments } from "yaml";
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import { status as clusterStatus, defaultClusterDir, kubeconfigPath, up } from "../../cluster/index.ts";
import { install } from "../../install/install.ts";
import { childNames } from "../../operator/names.ts";
import { createOperator } from "../../operator/run.ts";
import { builtinKinds, type KubeClient, type KubeObject, shutdownSignal } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { parseCommandLine } from "../views/session.ts";
import { cliClient } from "./kubeconfig-flag.ts";

export const summary = "start everything: local cluster (or KUBECONFIG), install, operator, a sample model";

const samplesDir = join(import.meta.dirname, "..", "..", "..", "samples");
const samples: Record<string, string> = {
  download: "mlmodel-download-then-serve.yaml",
  tfserving: "tfserving-operator.yaml",
  machinemodel: "machinemodel.yaml",
};

const help = `Usage: mlmodel start [--kubeconfig PATH] [--sample NAME] [--namespace NS] [--exit-when-ready]

Brings up the local control plane unless a cluster is configured (--kubeconfig or KUBECONFIG),
installs the CRDs, built-in runtimes and RBAC, runs the operator, applies a sample MLModel and
shows its status until it is Ready. The operator then keeps running until Ctrl-C.

Flags:
  --kubeconfig PATH   use this cluster instead of the local control plane
  --sample NAME       ${Object.keys(samples).join(", ")} (default download: URL -> storage -> Job -> Deployment -> Service)
  --namespace NS      namespace of the sample (default default)
  --exit-when-ready   stop the operator and exit 0 once the sample is Ready

Examples:
  npm start
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

export async function run(argv: string[]): Promise<number> {
  const { values } = parseCommandLine(
    argv,
    {
      kubeconfig: { type: "string" },
      sample: { type: "string", default: "download" },
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
  const sampleFile = samples[values.sample ?? "download"];
  if (!sampleFile) {
    throw new CliError(`--sample "${values.sample}" is not one of ${Object.keys(samples).join(", ")}`, 2);
  }
  const namespace = values.namespace ?? "default";

  const { kc, local } = await kubeConfigOrLocalCluster(values.kubeconfig);
  const client = cliClient(kc);
  console.log("installing CRDs, built-in runtimes and RBAC");
  await install(client);

  const operator = await createOperator({ kubeConfig: kc, logger: pino({ level: "warn" }) });
  const stop = new AbortController();
  const signal = shutdownSignal();
  signal.addEventListener("abort", () => stop.abort(), { once: true });
  const running = operator.start(stop.signal);
  console.log("operator running");

  try {
    await client.apply(
      builtinKinds.Namespace,
      { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } },
      { fieldManager: "mlmodel-start", force: true },
    );
    const objects = parseAllDocuments(readFileSync(join(samplesDir, sampleFile), "utf8")).map(
      (d) => d.toJS() as KubeObject,
    );
    const model = objects.find((o) => o.kind === "MLModel") as MLModel;
    const name = model.metadata.name!;
    if (
      model.spec.model.uri &&
      !model.spec.model.uri.startsWith("pvc://") &&
      (local || !(await hasStorageClass(client)))
    ) {
      console.log(
        "the cluster has no volume provisioner: providing a hostPath PersistentVolume for the model",
      );
      await provideLocalVolume(client, namespace, childNames.storage(name));
    }
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

    let last = "";
    while (!stop.signal.aborted) {
      const current = await client.get<MLModel>(mlModelKind, { namespace, name }).catch(() => undefined);
      if (current) {
        const line = describe(current);
        if (line !== last) console.log(`  ${name}: ${line}`);
        last = line;
        const ready =
          current.status?.phase === "Ready" &&
          current.status.observedGeneration === current.metadata.generation;
        if (ready) {
          console.log(`\n${name} is Ready at ${current.status?.url}`);
          console.log(
            `  kubectl --kubeconfig ${values.kubeconfig ?? process.env.KUBECONFIG ?? kubeconfigPath(defaultClusterDir())} get mlm -n ${namespace}`,
          );
          break;
        }
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  } catch (err) {
    stop.abort();
    await running.catch(() => {});
    throw err;
  }
  if (values["exit-when-ready"]) stop.abort();
  else if (!stop.signal.aborted) console.log("the operator keeps running; Ctrl-C to stop");
  await running;
  return 0;
}
