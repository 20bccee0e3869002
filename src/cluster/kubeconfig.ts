/** A self-contained kubeconfig (certificates inlined), so it can be copied anywhere. */
import { stringify } from "yaml";

export interface KubeconfigInput {
  server: string;
  caPem: string;
  certPem: string;
  keyPem: string;
  user: string;
  context?: string;
}

const b64 = (text: string) => Buffer.from(text).toString("base64");

export function renderKubeconfig(input: KubeconfigInput): string {
  const context = input.context ?? "mlmodel-local";
  return stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name: "mlmodel-local",
        cluster: { server: input.server, "certificate-authority-data": b64(input.caPem) },
      },
    ],
    users: [
      {
        name: input.user,
        user: { "client-certificate-data": b64(input.certPem), "client-key-data": b64(input.keyPem) },
      },
    ],
    contexts: [{ name: context, context: { cluster: "mlmodel-local", user: input.user } }],
    "current-context": context,
  });
}
