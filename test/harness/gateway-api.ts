/**
 * The Gateway API CRDs for tests that need HTTPRoutes: installs them (sigs.k8s.io/gateway-api's
 * standard channel, from Go's module cache) into the run's shared cluster, once per test
 * process. Server-side apply, so test files running side by side may all call it.
 *
 *   before(async () => { await gatewayApiCrds(); });
 */
import { installGatewayApiCrds } from "../../src/cluster/gateway-api.ts";

let installed: Promise<{ version: string; crds: string[] }> | undefined;

export function gatewayApiCrds(): Promise<{ version: string; crds: string[] }> {
  const kubeconfig = process.env.KUBECONFIG;
  if (!kubeconfig) {
    throw new Error(
      "KUBECONFIG is not set: run the test through `npm test` (scripts/test.ts), which starts a real control plane",
    );
  }
  installed ??= installGatewayApiCrds(kubeconfig);
  return installed;
}
