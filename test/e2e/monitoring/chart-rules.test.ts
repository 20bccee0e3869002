// test-needs: prometheus
/**
 * The chart's monitoring files, checked with the real promtool: the alert rules pass their
 * rule tests (rules/mlmodel-alerts.test.yaml), the scrape jobs and the local cluster's
 * prometheus.yml pass `promtool check config`, and the dashboard only queries metrics the
 * operator serves.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { parse } from "yaml";
import {
  chartRulesFile,
  chartScrapeConfigsFile,
  ensurePrometheus,
  operatorJob,
  prometheusConfig,
} from "../../../src/cluster/prometheus.ts";
import { modelMetricFamilies } from "../../../src/operator/metrics.ts";
import { RuntimeMetrics } from "../../../src/runtime/index.ts";
import { requireDeclared } from "../../harness/prerequisites/needs.ts";

const chartDir = join(import.meta.dirname, "..", "..", "..", "deploy", "helm", "mlmodel-operator");
const scratch = mkdtempSync(join(tmpdir(), "mlmodel-monitoring-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

async function promtool(args: string[], cwd?: string): Promise<{ status: number | null; output: string }> {
  requireDeclared("prometheus");
  const { promtool: bin } = await ensurePrometheus();
  const result = spawnSync(bin, args, { cwd, encoding: "utf8" });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

/** Every metric family name the operator serves: the runtime's and the per-model ones. */
async function servedFamilies(): Promise<Set<string>> {
  const metrics = await new RuntimeMetrics().registry.getMetricsAsJSON();
  return new Set([...metrics.map((m) => m.name), ...Object.keys(modelMetricFamilies)]);
}

/**
 * The metric names a PromQL expression reads: what is left once selectors, ranges, strings and
 * `by (...)` groupings are removed, less function calls (a name followed by "(").
 */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"[^"]*"/g, "")
    .replace(/\{[^}]*\}|\[[^\]]*\]/g, " ")
    .replace(/\b(by|without|on|ignoring)\s*\([^)]*\)/g, " ");
  return [...bare.matchAll(/\b([a-z_][a-z0-9_]*)\b(?!\s*\()/g)]
    .map((m) => m[1]!)
    .filter((n) => n.includes("_"));
}

describe("the chart's alert rules", () => {
  it("pass promtool check rules and their rule tests", async () => {
    const check = await promtool(["check", "rules", chartRulesFile]);
    assert.equal(check.status, 0, check.output);
    assert.match(check.output, /SUCCESS: 5 rules found/);
    const test = await promtool(["test", "rules", "mlmodel-alerts.test.yaml"], join(chartDir, "rules"));
    assert.equal(test.status, 0, test.output);
    assert.match(test.output, /SUCCESS/);
  });

  it("fail their rule tests when a rule changes (the tests check what fires)", async () => {
    const rules = readFileSync(chartRulesFile, "utf8").replace("for: 15m", "for: 5m");
    writeFileSync(join(scratch, "mlmodel-alerts.yaml"), rules);
    writeFileSync(
      join(scratch, "mlmodel-alerts.test.yaml"),
      readFileSync(join(chartDir, "rules", "mlmodel-alerts.test.yaml")),
    );
    const test = await promtool(["test", "rules", "mlmodel-alerts.test.yaml"], scratch);
    assert.notEqual(test.status, 0, "a 5-minute NotReady rule must fail the 14-minute expectation");
    assert.match(test.output, /MLModelNotReady/);
  });

  it("read only metrics the operator serves", async () => {
    const served = await servedFamilies();
    const doc = parse(readFileSync(chartRulesFile, "utf8")) as { groups: { rules: { expr: string }[] }[] };
    const read = doc.groups.flatMap((g) => g.rules.flatMap((r) => metricNames(r.expr)));
    assert.ok(read.length >= 5, `rules read ${read.join(", ")}`);
    assert.deepEqual(
      read.filter((n) => !served.has(n)),
      [],
    );
  });
});

describe("the Grafana dashboard", () => {
  it("is valid JSON whose queries read only metrics the operator serves", async () => {
    const served = await servedFamilies();
    const dashboard = JSON.parse(
      readFileSync(join(chartDir, "dashboards", "mlmodel-operator.json"), "utf8"),
    ) as {
      panels: { title: string; targets: { expr: string }[] }[];
    };
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr));
    assert.ok(exprs.length >= dashboard.panels.length);
    const read = exprs.flatMap(metricNames).map((n) => n.replace(/_(bucket|sum|count)$/, ""));
    assert.deepEqual(
      read.filter((n) => !served.has(n)),
      [],
    );
    for (const family of Object.keys(modelMetricFamilies))
      assert.ok(
        exprs.some((e) => e.includes(family)) || family === "mlmodel_revision_number",
        `the dashboard shows ${family}`,
      );
  });
});

describe("the scrape configuration", () => {
  it("the chart's scrape jobs are a valid Prometheus configuration as they ship", async () => {
    const file = join(scratch, "chart-only.yml");
    writeFileSync(file, readFileSync(chartScrapeConfigsFile, "utf8"));
    const check = await promtool(["check", "config", "--syntax-only", file]);
    assert.equal(check.status, 0, check.output);
  });

  it("the local cluster's prometheus.yml: the host operators' job and the chart's jobs, with the rules", async () => {
    const clusterDir = join(scratch, "cluster");
    const kubeconfig = join(scratch, "admin.kubeconfig");
    writeFileSync(kubeconfig, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n");
    const text = await prometheusConfig(clusterDir, kubeconfig);
    const config = parse(text) as {
      rule_files: string[];
      scrape_configs: { job_name: string; kubernetes_sd_configs?: { kubeconfig_file: string }[] }[];
    };
    assert.deepEqual(config.rule_files, [chartRulesFile]);
    const jobs = config.scrape_configs.map((j) => j.job_name);
    assert.equal(jobs[0], operatorJob);
    assert.equal(new Set(jobs).size, jobs.length, `job names are unique: ${jobs.join(", ")}`);
    const chartJobs = (parse(readFileSync(chartScrapeConfigsFile, "utf8")) as { scrape_configs: unknown[] })
      .scrape_configs.length;
    assert.equal(jobs.length, chartJobs + 1);
    for (const job of config.scrape_configs.slice(1))
      assert.deepEqual(
        job.kubernetes_sd_configs?.map((sd) => sd.kubeconfig_file),
        [kubeconfig],
      );
    const file = join(scratch, "prometheus.yml");
    writeFileSync(file, text);
    const check = await promtool(["check", "config", "--syntax-only", file]);
    assert.equal(check.status, 0, check.output);
  });
});
