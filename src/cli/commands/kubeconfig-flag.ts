/** The --kubeconfig flag of install, operator and start: load it, or say why it cannot be used. */
import { KubeConfig } from "@kubernetes/client-node";
import { KubeClient } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";

/** Loads PATH, else the default chain ($KUBECONFIG, ~/.kube/config, in-cluster). */
export function loadKubeConfig(path: string | undefined, hint: string): KubeConfig {
  const kc = new KubeConfig();
  try {
    if (path) kc.loadFromFile(path);
    else kc.loadFromDefault();
  } catch (err) {
    throw new CliError(`cannot load kubeconfig ${path ?? "(default)"}: ${(err as Error).message}`);
  }
  if (!kc.getCurrentCluster()) throw new CliError(`no cluster configured: ${hint}`);
  return kc;
}

/** The CLI's API client: the runtime's, with every credential form client-node knows. */
export function cliClient(kc: KubeConfig): KubeClient {
  return KubeClient.fromKubeConfig(kc, { userAgent: "mlmodel-cli" });
}
