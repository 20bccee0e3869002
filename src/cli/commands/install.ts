/** `mlmodel install`: CRDs, built-in runtimes and the operator's RBAC, applied to a cluster. */
import { stringify } from "yaml";
import { install } from "../../install/install.ts";
import { defaultOperatorNamespace, installManifests } from "../../install/manifests.ts";
import { isDnsLabel } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { parseCommandLine } from "../views/session.ts";
import { cliClient, loadKubeConfig } from "./kubeconfig-flag.ts";

export const summary = "install CRDs, built-in serving runtimes and operator RBAC into a cluster";

const help = `Usage: mlmodel install [--kubeconfig PATH] [--namespace NS] [--print]

Applies (server-side apply) the MLModel, ServingRuntime and ClusterServingRuntime CRDs, the
built-in ClusterServingRuntimes (tensorflow-serving, triton, mlserver, torchserve) and the
operator's ServiceAccount and least-privilege RBAC in namespace NS.

Flags:
  --kubeconfig PATH   cluster to install into (default: $KUBECONFIG, ~/.kube/config)
  --namespace NS      namespace of the operator's ServiceAccount (default ${defaultOperatorNamespace})
  --print             print the manifests as YAML instead of applying them

Examples:
  mlmodel install --kubeconfig "$(mlmodel cluster kubeconfig)"
  mlmodel install --print > install.yaml`;

export async function run(argv: string[]): Promise<number> {
  const { values } = parseCommandLine(
    argv,
    {
      kubeconfig: { type: "string" },
      namespace: { type: "string" },
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
  if (values.print) {
    const objects = installManifests(namespace).flatMap((f) => f.objects);
    process.stdout.write(objects.map((o) => stringify(o, { lineWidth: 0 })).join("---\n"));
    return 0;
  }
  const kc = loadKubeConfig(values.kubeconfig, "pass --kubeconfig PATH or set KUBECONFIG");
  await install(cliClient(kc), { namespace, progress: (line) => console.log(line) });
  console.log(
    `installed; run the operator with: mlmodel operator${values.kubeconfig ? ` --kubeconfig ${values.kubeconfig}` : ""}`,
  );
  return 0;
}
