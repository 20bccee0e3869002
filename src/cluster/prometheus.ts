/**
 * Prometheus beside the local control plane (`mlmodel cluster up --monitoring`): built from its
 * Go module into the binary cache like the control plane's binaries, started as one more
 * process of the cluster, with the Helm chart's own scrape configuration and alert rules.
 *
 * The chart's scrape jobs find the operator's metrics Service and the serving pods through
 * Kubernetes service discovery (here with the cluster's admin kubeconfig). An operator run on
 * the host (`mlmodel operator`, the tests) is no pod: it is found through a file of targets in
 * the cluster dir (`operatorTargetsFile`), which starts with the operator's default address
 * and which a test rewrites with the address its operator listens on; Prometheus rereads it.
 */
import { writeFileSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { ensureRecipes, type ProgressFn, type Recipe } from "./binaries.ts";
import { packageRoot } from "./paths.ts";
import { type ProcessRecord, probe, startProcess, waitUntil } from "./process.ts";

/** The Go module version of Prometheus 3.16.0 (Prometheus 3.x tags its module v0.3xx.y). */
export const prometheusModuleVersion = "v0.316.0";
const prometheusVersion = `3.${Number(prometheusModuleVersion.split(".")[1]) - 300}.${prometheusModuleVersion.split(".")[2]}`;

/**
 * The service discovery Prometheus is built with besides file_sd and http_sd, which it always
 * compiles: Kubernetes', for the chart's scrape jobs. Leaving out the cloud providers' (AWS,
 * Azure, GCE, OpenStack, Consul, ...) spares compiling their SDKs; a config that names one of
 * them fails to load, which the unit tests check ours does not.
 */
const optionalServiceDiscovery = ["kubernetes"];
/** The `<name>_sd_configs` a config may use with this build. */
export const compiledServiceDiscovery: readonly string[] = ["file", "http", ...optionalServiceDiscovery];

const versionPackage = "github.com/prometheus/common/version";
export const prometheusRecipe: Recipe = {
  // The key names the discovery built in: an entry built with every plugin (or another set) is
  // a different build, reused by no one who asks for this one.
  key: `prometheus-${prometheusModuleVersion}-${optionalServiceDiscovery.join("-")}-sd`,
  binaries: ["prometheus", "promtool"],
  packages: ["prometheus", "promtool"].map(
    (cmd) => `github.com/prometheus/prometheus/cmd/${cmd}@${prometheusModuleVersion}`,
  ),
  tags: ["remove_all_sd", ...optionalServiceDiscovery.map((sd) => `enable_${sd}_sd`)],
  // Without the builtinassets tag the web UI's assets are not compiled in: the HTTP API,
  // which is what the tests and Grafana use, works the same.
  ldflags: [
    "-s",
    "-w",
    `-X ${versionPackage}.Version=${prometheusVersion}`,
    `-X ${versionPackage}.Branch=HEAD`,
  ],
  coldBuild: "about 7 minutes",
};

export interface PrometheusBinaries {
  prometheus: string;
  promtool: string;
}

/** The cached prometheus and promtool, built (under a lock) when the cache lacks them. */
export async function ensurePrometheus(progress: ProgressFn = () => {}): Promise<PrometheusBinaries> {
  return ensureRecipes<keyof PrometheusBinaries>([prometheusRecipe], progress);
}

const chartDir = join(packageRoot, "deploy", "helm", "mlmodel-operator");
/** The chart's scrape jobs (Kubernetes service discovery) and its alert rules. */
export const chartScrapeConfigsFile = join(chartDir, "monitoring", "scrape-configs.yaml");
export const chartRulesFile = join(chartDir, "rules", "mlmodel-alerts.yaml");

export const monitoringDir = (clusterDir: string) => join(clusterDir, "monitoring");
/** Where Prometheus reads the host-run operators' metrics addresses (file_sd, JSON). */
export const operatorTargetsFile = (clusterDir: string) =>
  join(monitoringDir(clusterDir), "operator-targets.json");

/** The job name the chart gives the operator's metrics; the host operators' job has it too. */
export const operatorJob = "mlmodel-operator";

type ScrapeConfig = Record<string, unknown> & { job_name: string };

/** The chart's scrape jobs, each pointed at the cluster through `kubeconfig`. */
export async function chartScrapeConfigs(kubeconfig: string): Promise<ScrapeConfig[]> {
  const doc = parse(await readFile(chartScrapeConfigsFile, "utf8")) as { scrape_configs: ScrapeConfig[] };
  return doc.scrape_configs.map((job) => ({
    ...job,
    kubernetes_sd_configs: (job.kubernetes_sd_configs as Record<string, unknown>[] | undefined)?.map(
      (sd) => ({
        ...sd,
        kubeconfig_file: kubeconfig,
      }),
    ),
  }));
}

/** The whole prometheus.yml of a local cluster. */
export async function prometheusConfig(
  clusterDir: string,
  kubeconfig: string,
  scrapeInterval = "5s",
): Promise<string> {
  const hostOperators: ScrapeConfig = {
    job_name: operatorJob,
    file_sd_configs: [{ files: [operatorTargetsFile(clusterDir)], refresh_interval: "5s" }],
  };
  const chartJobs = (await chartScrapeConfigs(kubeconfig)).map((job) =>
    // Two jobs may not share a name: the in-cluster operator's keeps its own.
    job.job_name === operatorJob ? { ...job, job_name: `${operatorJob}-pods` } : job,
  );
  return stringify({
    global: { scrape_interval: scrapeInterval, evaluation_interval: scrapeInterval },
    rule_files: [chartRulesFile],
    scrape_configs: [hostOperators, ...chartJobs],
  });
}

/** Writes the metrics addresses ("host:port") of the operators run on the host. */
export function writeOperatorTargets(clusterDir: string, targets: string[]): void {
  writeFileSync(operatorTargetsFile(clusterDir), JSON.stringify([{ targets, labels: {} }]));
}

async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

const urlFile = (clusterDir: string) => join(monitoringDir(clusterDir), "url");

/** The URL of the Prometheus `up --monitoring` started for the cluster in `clusterDir`, if any. */
export async function prometheusUrl(clusterDir: string): Promise<string | undefined> {
  return readFile(urlFile(clusterDir), "utf8").catch(() => undefined);
}

/** Prometheus's readiness endpoint: 200 once it serves queries (what `cluster status` asks). */
export const prometheusReadyUrl = (base: string) => `${base}/-/ready`;

export interface RunningPrometheus {
  record: ProcessRecord<"prometheus">;
  /** Base URL of its HTTP API, e.g. http://127.0.0.1:40123. */
  url: string;
}

/**
 * Starts Prometheus for the cluster in `clusterDir` (its config, data and log there) and waits
 * until it is ready. The operator's default metrics address (:8080) is its first target.
 */
export async function startPrometheus(
  clusterDir: string,
  kubeconfig: string,
  progress: ProgressFn = () => {},
): Promise<RunningPrometheus> {
  const { prometheus } = await ensurePrometheus(progress);
  const dir = monitoringDir(clusterDir);
  await mkdir(join(dir, "data"), { recursive: true });
  await mkdir(join(clusterDir, "logs"), { recursive: true });
  const configFile = join(dir, "prometheus.yml");
  await writeFile(configFile, await prometheusConfig(clusterDir, kubeconfig));
  writeOperatorTargets(clusterDir, ["127.0.0.1:8080"]);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const record = startProcess(
    "prometheus",
    prometheus,
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--storage.tsdb.retention.time=1d",
    ],
    join(clusterDir, "logs", "prometheus.log"),
  );
  await waitUntil(
    record,
    "ready",
    async () => (await probe({ url: prometheusReadyUrl(url) })).code === 200,
    60_000,
  );
  await writeFile(urlFile(clusterDir), url);
  progress(`prometheus ${prometheusVersion} is ready at ${url} (config ${configFile})`);
  return { record, url };
}
