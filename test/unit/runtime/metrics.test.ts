/**
 * The metric families the runtime exposes on /metrics: dashboards and alerts are written
 * against these names, types and help texts, so a change here must be deliberate. The
 * runtime loads prom-client file by file and makes the CPU counters itself (metrics.ts);
 * these tests hold it to what prom-client's own collectDefaultMetrics exposes.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { collectDefaultMetrics, Registry } from "prom-client";
import { RuntimeMetrics } from "../../../src/runtime/metrics.ts";

interface Family {
  name: string;
  type: string;
  help: string;
}

/** The `# HELP` and `# TYPE` lines of an exposition, in order. */
function families(exposition: string): Family[] {
  const help = new Map<string, string>();
  const out: Family[] = [];
  for (const line of exposition.split("\n")) {
    const h = /^# HELP (\S+) (.*)$/.exec(line);
    if (h) help.set(h[1]!, h[2]!);
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) out.push({ name: t[1]!, type: t[2]!, help: help.get(t[1]!) ?? "" });
  }
  return out;
}

/** Label names seen on each family's samples (histogram suffixes folded into the family). */
function labelNames(exposition: string): Map<string, string[]> {
  const out = new Map<string, Set<string>>();
  for (const line of exposition.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*?)(?:_bucket|_sum|_count)?(?:\{(.*)\})? \S+$/.exec(line);
    if (!m || line.startsWith("#")) continue;
    const names = out.get(m[1]!) ?? new Set<string>();
    for (const pair of (m[2] ?? "").matchAll(/(\w+)="/g)) if (pair[1] !== "le") names.add(pair[1]!);
    out.set(m[1]!, names);
  }
  return new Map([...out].map(([k, v]) => [k, [...v].sort()]));
}

/** What `mlmodel operator` serves, as of this test's writing: every family, its type, in order. */
const exposedFamilies = [
  "process_cpu_user_seconds_total counter",
  "process_cpu_system_seconds_total counter",
  "process_cpu_seconds_total counter",
  "process_start_time_seconds gauge",
  "process_resident_memory_bytes gauge",
  "process_virtual_memory_bytes gauge",
  "process_heap_bytes gauge",
  "process_open_fds gauge",
  "process_max_fds gauge",
  "nodejs_eventloop_lag_seconds gauge",
  "nodejs_eventloop_lag_min_seconds gauge",
  "nodejs_eventloop_lag_max_seconds gauge",
  "nodejs_eventloop_lag_mean_seconds gauge",
  "nodejs_eventloop_lag_stddev_seconds gauge",
  "nodejs_eventloop_lag_p50_seconds gauge",
  "nodejs_eventloop_lag_p90_seconds gauge",
  "nodejs_eventloop_lag_p99_seconds gauge",
  "nodejs_active_resources gauge",
  "nodejs_active_resources_total gauge",
  "nodejs_active_handles gauge",
  "nodejs_active_handles_total gauge",
  "nodejs_active_requests gauge",
  "nodejs_active_requests_total gauge",
  "nodejs_heap_size_total_bytes gauge",
  "nodejs_heap_size_used_bytes gauge",
  "nodejs_external_memory_bytes gauge",
  "nodejs_heap_space_size_total_bytes gauge",
  "nodejs_heap_space_size_used_bytes gauge",
  "nodejs_heap_space_size_available_bytes gauge",
  "nodejs_version_info gauge",
  "nodejs_gc_duration_seconds histogram",
  "controller_runtime_reconcile_total counter",
  "controller_runtime_reconcile_errors_total counter",
  "controller_runtime_terminal_reconcile_errors_total counter",
  "controller_runtime_reconcile_time_seconds histogram",
  "controller_runtime_active_workers gauge",
  "controller_runtime_max_concurrent_reconciles gauge",
  "workqueue_depth gauge",
  "workqueue_adds_total counter",
  "workqueue_queue_duration_seconds histogram",
  "workqueue_work_duration_seconds histogram",
  "workqueue_retries_total counter",
  "leader_election_master_status gauge",
  "rest_client_requests_total counter",
  "watch_events_total counter",
  "heap_reclaims_total counter",
  "heap_reclaimed_bytes_total counter",
];

/** A RuntimeMetrics with one controller whose every series has a sample. */
async function runtimeExposition(): Promise<string> {
  const m = new RuntimeMetrics();
  m.initController("mlmodel", 2);
  const q = m.queueHooks("mlmodel");
  q.depth?.(1);
  q.add?.();
  q.queueDuration?.(0.001);
  q.workDuration?.(0.002);
  q.retry?.();
  m.reconcileTime.observe({ controller: "mlmodel" }, 0.01);
  m.leaderStatus.set({ name: "lease" }, 1);
  m.recordRequest({ code: 200, method: "GET", verb: "list" });
  m.watchEventHook("ConfigMap")("ADDED");
  return m.registry.metrics();
}

describe("RuntimeMetrics exposition", () => {
  it("keeps every family's name and type, in order", async () => {
    const got = families(await runtimeExposition()).map((f) => `${f.name} ${f.type}`);
    assert.deepEqual(got, exposedFamilies);
  });

  it("exposes prom-client's default metrics as its collectDefaultMetrics does: names, types, help, labels, order", async () => {
    const reference = new Registry();
    collectDefaultMetrics({ register: reference });
    const want = families(await reference.metrics());
    const ours = await runtimeExposition();
    const defaults = new Set(want.map((f) => f.name));
    assert.deepEqual(
      families(ours).filter((f) => defaults.has(f.name)),
      want,
    );
    const wantLabels = labelNames(await reference.metrics());
    const ourLabels = labelNames(ours);
    // Label names of the families that always have samples (gc and the per-type handle
    // counts depend on what the process did, not on how the metric was registered).
    for (const name of [
      "nodejs_heap_space_size_used_bytes",
      "nodejs_version_info",
      "process_cpu_seconds_total",
    ]) {
      assert.deepEqual(ourLabels.get(name), wantLabels.get(name), name);
    }
  });

  it("labels the runtime's series as controller-runtime does", async () => {
    const labels = labelNames(await runtimeExposition());
    assert.deepEqual(labels.get("controller_runtime_reconcile_total"), ["controller", "result"]);
    assert.deepEqual(labels.get("controller_runtime_reconcile_time_seconds"), ["controller"]);
    assert.deepEqual(labels.get("workqueue_depth"), ["controller", "name"]);
    assert.deepEqual(labels.get("workqueue_queue_duration_seconds"), ["controller", "name"]);
    assert.deepEqual(labels.get("leader_election_master_status"), ["name"]);
    assert.deepEqual(labels.get("rest_client_requests_total"), ["code", "method", "verb"]);
    assert.deepEqual(labels.get("watch_events_total"), ["cache", "type"]);
  });

  it("counts each cache's watch events by type", async () => {
    const m = new RuntimeMetrics({ defaultMetrics: false });
    const pods = m.watchEventHook("Pod");
    const models = m.watchEventHook("MLModel.serving.mlmodel.dev");
    for (const type of ["ADDED", "MODIFIED", "MODIFIED", "BOOKMARK"]) pods(type);
    models("DELETED");
    const text = await m.registry.metrics();
    const lines = text.split("\n").filter((l) => l.startsWith("watch_events_total{"));
    assert.deepEqual(lines.sort(), [
      'watch_events_total{cache="MLModel.serving.mlmodel.dev",type="DELETED"} 1',
      'watch_events_total{cache="Pod",type="ADDED"} 1',
      'watch_events_total{cache="Pod",type="BOOKMARK"} 1',
      'watch_events_total{cache="Pod",type="MODIFIED"} 2',
    ]);
  });

  it("counts this process's CPU time, the total being user plus system", async () => {
    const m = new RuntimeMetrics();
    const start = process.cpuUsage();
    while (process.cpuUsage(start).user < 20_000) {
      // Spend 20 ms of CPU so the counters have something to count.
    }
    const value = (name: string, text: string) => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
    const text = await m.registry.metrics();
    const user = value("process_cpu_user_seconds_total", text);
    const system = value("process_cpu_system_seconds_total", text);
    const total = value("process_cpu_seconds_total", text);
    assert.ok(user >= 0.02, `user CPU ${user} s counts the 20 ms spent`);
    assert.ok(Math.abs(total - (user + system)) < 1e-9, `total ${total} = user ${user} + system ${system}`);
    const later = await m.registry.metrics();
    assert.ok(value("process_cpu_seconds_total", later) >= total, "a counter never goes down");
  });

  it("loads neither prom-client's index nor @opentelemetry/api", () => {
    // In a fresh process: this one imported prom-client's index above, for the reference.
    const script = `
      import { createRequire } from "node:module";
      const { RuntimeMetrics } = await import(${JSON.stringify(new URL("../../../src/runtime/metrics.ts", import.meta.url).href)});
      new RuntimeMetrics();
      console.log(JSON.stringify(Object.keys(createRequire(import.meta.url).cache)));`;
    const res = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    assert.equal(res.status, 0, res.stderr);
    const loaded = JSON.parse(res.stdout) as string[];
    assert.ok(
      loaded.some((f) => f.includes("prom-client/lib/registry.js")),
      "prom-client's registry is loaded",
    );
    assert.deepEqual(
      loaded.filter((f) => /@opentelemetry|prom-client\/index\.js|tdigest|pushgateway/.test(f)),
      [],
    );
  });
});
