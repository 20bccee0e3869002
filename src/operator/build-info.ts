/**
 * Which build of the operator runs: `mlmodel_operator_build_info{build="..."} 1`, the build being
 * the image's MLMODEL_BUILD (empty when the image does not set it). Two builds of the same
 * sources (a release and a patched one, or the two images an upgrade test switches between)
 * tell themselves apart here without changing anything the operator writes to a cluster.
 */
import { createRequire } from "node:module";
import type * as PromClient from "prom-client";

const Gauge = createRequire(import.meta.url)("prom-client/lib/gauge.js") as typeof PromClient.Gauge;

/** The environment variable an image sets to name its build. */
export const buildEnv = "MLMODEL_BUILD";
export const buildInfoMetric = "mlmodel_operator_build_info";

export function registerBuildInfo(registry: PromClient.Registry, env: NodeJS.ProcessEnv = process.env): void {
  const gauge = new Gauge({
    name: buildInfoMetric,
    help: `Always 1; its build label is the image's ${buildEnv} (empty when unset)`,
    labelNames: ["build"],
    registers: [registry],
  });
  gauge.set({ build: env[buildEnv] ?? "" }, 1);
}
