/** `mlmodel install`: CRDs, built-in runtimes, the operator's RBAC and optionally its pods, applied to a cluster. */
import { stringify } from "yaml";
import { install } from "../../install/install.ts";
import { defaultOperatorNamespace, installManifests } from "../../install/manifests.ts";
import { defaultOperatorImage, operatorPodManifests } from "../../install/operator-deployment.ts";
import { operatorName } from "../../operator/names.ts";
import { isDnsLabel } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { parseCommandLine } from "../views/session.ts";
import { cliClient, loadKubeConfig } from "./kubeconfig-flag.ts";

export const summary =
  "install CRDs, built-in serving runtimes, operator RBAC (and the operator) into a cluster";

const help = `Usage: mlmodel install [--kubeconfig PATH] [--namespace NS] [--in-cluster [--image REF] [--replicas N]] [--print]

Applies (server-side apply) the MLModel, ServingRuntime and ClusterServingRuntime CRDs, the
built-in ClusterServingRuntimes (tensorflow-serving, triton, mlserver, torchserve) and the
operator's ServiceAccount and least-privilege RBAC in namespace NS. With --in-cluster, also the
operator itself as pods (the Deployment dist/install.yaml and the Helm chart install): without
it, run the operator yourself with \`mlmodel operator\`.

Flags:
  --kubeconfig PATH   cluster to install into (default: $KUBECONFIG, ~/.kube/config)
  --namespace NS      namespace of the operator's ServiceAccount (default ${defaultOperatorNamespace})
  --in-cluster        also deploy the operator: a Deployment in NS, restricted, as its ServiceAccount
  --image REF         the operator's image, also the download Jobs' (default ${defaultOperatorImage})
  --replicas N        operator pods; more than one elect a leader (default 2)
  --print             print the manifests as YAML instead of applying them

Examples:
  mlmodel install --kubeconfig "$(mlmodel cluster kubeconfig)"
  mlmodel install --in-cluster --image registry.example.com/mlmodel:0.1.0
  mlmodel install --print > install.yaml`;

/** The operator pods' options from the flags, or undefined without --in-cluster. */
export function operatorPodsFrom(values: {
  "in-cluster"?: boolean;
  image?: string;
  replicas?: string;
}): { image: string; replicas: number } | undefined {
  if (!values["in-cluster"]) {
    const stray = values.image !== undefined ? "--image" : values.replicas !== undefined ? "--replicas" : "";
    if (stray) throw new CliError(`${stray} configures the operator's pods: add --in-cluster`, 2);
    return undefined;
  }
  const replicas = Number(values.replicas ?? "2");
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 10) {
    throw new CliError(`--replicas "${values.replicas}" must be a whole number from 1 to 10`, 2);
  }
  const image = values.image ?? defaultOperatorImage;
  if (!image.trim() || /\s/.test(image)) {
    throw new CliError(`--image "${image}" is not an image reference (e.g. ${defaultOperatorImage})`, 2);
  }
  return { image, replicas };
}

export async function run(argv: string[]): Promise<number> {
  const { values } = parseCommandLine(
    argv,
    {
      kubeconfig: { type: "string" },
      namespace: { type: "string" },
      "in-cluster": { type: "boolean" },
      image: { type: "string" },
      replicas: { type: "string" },
      print: { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
    help,
    false,
  );
  if (values.help) {
    console.log(help);
    return 0;
  }
  const namespace = values.namespace ?? defaultOperatorNamespace;
  if (!isDnsLabel(namespace)) {
    throw new CliError(
      `--namespace "${namespace}" is not a valid namespace name (lowercase letters, digits, '-', at most 63)`,
      2,
    );
  }
  const operatorPods = operatorPodsFrom(values);
  if (values.print) {
    const objects = [
      ...installManifests(namespace).flatMap((f) => f.objects),
      ...(operatorPods ? operatorPodManifests({ ...operatorPods, namespace }) : []),
    ];
    process.stdout.write(objects.map((o) => stringify(o, { lineWidth: 0 })).join("---\n"));
    return 0;
  }
  const kc = loadKubeConfig(values.kubeconfig, "pass --kubeconfig PATH or set KUBECONFIG");
  await install(cliClient(kc), {
    namespace,
    ...(operatorPods ? { operatorPods } : {}),
    progress: (line) => console.log(line),
  });
  console.log(
    operatorPods
      ? `installed; the operator runs as deployment ${namespace}/${operatorName} (${operatorPods.replicas} replica${operatorPods.replicas === 1 ? "" : "s"})`
      : `installed; run the operator with: mlmodel operator${values.kubeconfig ? ` --kubeconfig ${values.kubeconfig}` : ""}`,
  );
  return 0;
}
