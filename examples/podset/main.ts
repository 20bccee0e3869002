/**
 * Runs the PodSet controller: `node examples/podset/main.ts` (KUBECONFIG or in-cluster).
 * Env: LEADER_ELECT=1 (Lease podset-controller in POD_NAMESPACE or default),
 * METRICS_ADDR (default :8080), PROBE_ADDR (default :8081), WATCH_NAMESPACE.
 */
import { Manager } from "../../src/runtime/index.ts";
import { registerPodSet } from "./podset.ts";

const env = process.env;
const mgr = new Manager({
  metricsBindAddress: env["METRICS_ADDR"] ?? ":8080",
  healthProbeBindAddress: env["PROBE_ADDR"] ?? ":8081",
  reportingController: "examples.mlmodel.dev/podset",
  ...(env["WATCH_NAMESPACE"] ? { namespaces: [env["WATCH_NAMESPACE"]] } : {}),
  ...(env["LEADER_ELECT"] === "1"
    ? { leaderElection: { name: "podset-controller", namespace: env["POD_NAMESPACE"] ?? "default" } }
    : {}),
});
registerPodSet(mgr);
await mgr.start();
