/** Prometheus and promtool, for the monitoring tests (alert rule tests, scraping the operator). */
import { join } from "node:path";
import { buildTags, entriesDir, inspectEntry } from "../../../src/cluster/binaries.ts";
import {
  ensurePrometheus,
  prometheusModuleVersion,
  prometheusRecipe,
} from "../../../src/cluster/prometheus.ts";
import type { Prerequisite } from "./engine.ts";
import { requireGo } from "./install.ts";

export const prometheus: Prerequisite = {
  name: "prometheus",
  summary: `Prometheus and promtool built from their Go module ${prometheusModuleVersion} (cold: ${prometheusRecipe.coldBuild} on 2 cores)`,
  async check() {
    const dir = join(entriesDir(), prometheusRecipe.key);
    const entry = await inspectEntry(dir, prometheusRecipe);
    if (entry.state === "missing")
      return { state: "missing", why: `${prometheusRecipe.key} is not built yet` };
    if (entry.state === "corrupted") return { state: "missing", why: `${dir}: ${entry.why}` };
    return { state: "ready" };
  },
  install: async (progress) => {
    requireGo("prometheus");
    await ensurePrometheus(progress);
  },
  byHand: [
    "npm run prerequisites -- prometheus   # builds with Go 1.26+ through the Go module proxy",
    `what it runs: go install -trimpath -tags ${buildTags(prometheusRecipe)} github.com/prometheus/prometheus/cmd/{prometheus,promtool}@${prometheusModuleVersion}`,
  ].join("\n"),
};
