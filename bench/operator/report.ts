/**
 * What a run leaves behind: a JSON file per N, an SVG per series under bench/results/, and a
 * human summary. The JSON line the issue asks for is built here too.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { barChart, lineChart, type Series } from "../lib/svg.ts";
import type { OperatorBenchResult } from "./bench.ts";

export const resultsDir = join(import.meta.dirname, "..", "results");

/** The last-line JSON: the headline figures first, then every series. */
export function jsonLine(r: OperatorBenchResult): string {
  const { converge, floor, models, ...rest } = r;
  const strip = <T extends { latencies?: number[] }>(s: T | undefined) => {
    if (!s) return undefined;
    const { latencies: _l, ...keep } = s;
    return keep;
  };
  return JSON.stringify({
    models,
    operatorSeconds: r.operatorSeconds,
    floorSeconds: r.floorSeconds,
    ratio: r.ratio,
    requestsPerModel: r.requestsPerModel,
    peakRssMiB: r.peakRssMiB,
    ...rest,
    converge: strip(converge),
    floor: strip(floor),
  });
}

/** The cumulative share of models Ready over time since creation started. */
export function readyCurve(latencies: readonly number[]): { x: number; y: number }[] {
  const sorted = [...latencies].sort((a, b) => a - b);
  const step = Math.max(1, Math.floor(sorted.length / 100));
  const points = [{ x: 0, y: 0 }];
  for (let i = step - 1; i < sorted.length; i += step)
    points.push({ x: sorted[i]!, y: ((i + 1) / sorted.length) * 100 });
  const last = sorted.at(-1);
  if (last !== undefined && points.at(-1)!.y < 100) points.push({ x: last, y: 100 });
  return points;
}

export function writeResults(r: OperatorBenchResult, dir = resultsDir): string[] {
  mkdirSync(dir, { recursive: true });
  const written: string[] = [];
  const file = (name: string, content: string) => {
    writeFileSync(join(dir, name), content);
    written.push(join(dir, name));
  };
  const n = r.models;
  // Image-path files keep their names (and feed scaling.svg); the download path's are tagged.
  const replicas = r.replicas && r.replicas > 1 ? `-r${r.replicas}` : "";
  const tag = r.path === "image" ? `n${n}${replicas}` : `${r.path}-n${n}${replicas}`;
  const json = `${JSON.stringify(JSON.parse(jsonLine(r)), null, 2)}\n`;
  // A memory-only run must not replace the converge figures of its N.
  if (r.converge || r.floor) file(`operator-${tag}.json`, json);
  else if (r.memory) file("memory.json", json);
  const curves: Series[] = [];
  if (r.converge) curves.push({ name: "operator", points: readyCurve(r.converge.latencies) });
  if (r.floor)
    curves.push({ name: "floor (bare client, no operator)", points: readyCurve(r.floor.latencies) });
  if (curves.length)
    file(
      `converge-${tag}.svg`,
      lineChart(
        `Create -> Ready, ${n} ${r.path}-path models (noisy shared 2-core machine)`,
        "seconds after create",
        "% of models ready",
        curves,
      ),
    );
  if (r.converge)
    file(
      `requests-${tag}.svg`,
      barChart(
        `Operator API requests per model by verb, create -> Ready (${n} ${r.path}-path models)`,
        "requests per model",
        Object.entries(r.converge.requestsPerModelByVerb).map(([label, value]) => ({ label, value })),
      ),
    );
  const phases = [
    ["converge", r.converge?.seconds],
    ["floor", r.floor?.seconds],
    ["update 10%", r.update?.seconds],
    ["delete all", r.delete?.seconds],
  ].filter((p): p is [string, number] => p[1] !== undefined);
  if (phases.length)
    file(
      `phases-${tag}.svg`,
      barChart(
        `Seconds per series, ${n} ${r.path}-path models (noisy)`,
        "seconds",
        phases.map(([label, value]) => ({ label, value })),
      ),
    );
  if (r.memory?.points.length)
    file(
      "memory.svg",
      lineChart("Operator memory vs cached MLModels", "cached MLModels", "MiB", [
        { name: "RSS", points: r.memory.points.map((p) => ({ x: p.cachedModels, y: p.rssMiB })) },
        { name: "heap used", points: r.memory.points.map((p) => ({ x: p.cachedModels, y: p.heapUsedMiB })) },
        {
          name: "RSS, settled",
          points: r.memory.points.flatMap((p) =>
            p.settled ? [{ x: p.cachedModels, y: p.settled.rssMiB }] : [],
          ),
        },
      ]),
    );
  const scaling = scalingSeries(dir);
  if (scaling.length)
    file("scaling.svg", lineChart("Converge time vs models (noisy)", "models", "seconds", scaling));
  return written;
}

/** Operator and floor seconds from every operator-n*.json in `dir`, by N. */
export function scalingSeries(dir: string): Series[] {
  if (!existsSync(dir)) return [];
  const runs = readdirSync(dir)
    .filter((f) => /^operator-n\d+\.json$/.test(f))
    .map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")) as OperatorBenchResult)
    .sort((a, b) => a.models - b.models);
  const series = (name: string, pick: (r: OperatorBenchResult) => number | undefined): Series => ({
    name,
    points: runs.flatMap((r) => (pick(r) === undefined ? [] : [{ x: r.models, y: pick(r)! }])),
  });
  return [series("operator", (r) => r.operatorSeconds), series("floor", (r) => r.floorSeconds)].filter(
    (s) => s.points.length > 0,
  );
}

/** A few lines for a person; the JSON line follows. */
export function summary(r: OperatorBenchResult): string {
  const lines = [
    `machine: ${r.machine.cores} cores, ${r.machine.memoryGiB} GiB, ${r.machine.cluster} (${r.machine.note}; load average ${r.machine.loadAverage.join(" ")} at the start)`,
    `models: ${r.models} on the ${r.path} path, operator concurrency ${r.concurrency}, Node options "${r.machine.operatorNodeOptions}"`,
  ];
  const c = r.converge;
  if (c)
    lines.push(
      `converge: ${c.seconds}s; create->Ready p50 ${c.latency.p50}s p90 ${c.latency.p90}s p99 ${c.latency.p99}s; ` +
        `${c.requestsPerModel} requests/model ${JSON.stringify(c.requestsPerModelByVerb)}; ${c.reconcilesPerModel} reconciles/model; ` +
        `CPU ${c.cpuSeconds}s (${c.cpuMsPerModel} ms/model); peak RSS ${c.peakRssMiB} MiB; load average ${c.loadAverage} at the end`,
    );
  if (c)
    lines.push(
      `  watch events/model received by the operator: ${c.watchEventsPerModelTotal} ${JSON.stringify(c.watchEventsPerModel)}`,
    );
  if (c?.auditWritesPerModel)
    lines.push(
      `  audit-logged writes/model until the last Ready: ${c.auditWritesPerModelTotal} ${JSON.stringify(c.auditWritesPerModel)}`,
    );
  const p = r.placement;
  if (p)
    lines.push(
      `placement: ${Object.values(p.podsByNode).reduce((a, b) => a + b, 0)} serving pods on ${p.nodes} nodes, ${p.minPerNode}-${p.maxPerNode} per node ${JSON.stringify(p.podsByNode)}; models with every replica on its own node ${p.modelsOnDistinctNodes}, with two or more on one node ${p.modelsSharingANode}; pods with init containers ${p.podsWithInitContainers}, every one Completed in ${p.podsInitCompleted}` +
        (p.readyAfter
          ? `; pod creation -> Ready p50 ${p.readyAfter.p50}s p90 ${p.readyAfter.p90}s max ${p.readyAfter.max}s`
          : ""),
    );
  const cs = r.cacheState;
  if (cs)
    lines.push(
      `cache-state: ${cs.configMaps} agent state ConfigMaps of ${cs.keysPerConfigMap} keys each; every model's status.cache listed every node after ${cs.seconds}s (${cs.modelsShowingEveryNode} models); ${cs.reconciles} reconciles (${cs.reconcilesPerModel}/model), requests ${JSON.stringify(cs.requestsByVerb)}, CPU ${cs.cpuSeconds}s` +
        (cs.auditStatusWrites !== undefined
          ? `; audit log: ${cs.auditStatusWrites} status writes, other writes ${JSON.stringify(cs.auditOtherWrites)}`
          : "") +
        (cs.routineReport
          ? `; then a routine report (times only): ${cs.routineReport.reconciles} reconciles, ${cs.routineReport.auditWrites ?? "?"} audit-logged writes`
          : ""),
    );
  if (r.floor)
    lines.push(
      `floor: ${r.floor.seconds}s; p50 ${r.floor.latency.p50}s p99 ${r.floor.latency.p99}s; operator/floor ratio ${r.ratio}`,
    );
  if (r.pairs)
    lines.push(
      `pairs (operator s / floor s = ratio, load at start-end): ${r.pairs.map((p) => `${p.order} ${p.operatorSeconds}/${p.floorSeconds} = ${p.ratio} (load ${p.loadAverage.join("-")})`).join("; ")}; median ratio ${r.ratio}`,
    );
  const st = r.steady;
  if (st)
    lines.push(
      `steady (${st.idleSeconds}s idle from ${st.settleSeconds}s after the last Ready): ${st.writesPerMinute} writes/min, ${st.reconcilesPerMinute} reconciles/min, CPU ${st.cpuSeconds}s` +
        (st.auditWrites !== undefined
          ? `; audit log: ${st.auditWrites} writes ${JSON.stringify(st.auditWritesByVerbResource)} in the idle window, ${st.settleWrites} ${JSON.stringify(st.settleWritesByVerbResource)} in the ${st.settleSeconds}s before; last write ${st.lastWriteAfterReadySeconds ?? "-"}s after the last Ready`
          : "; no audit log"),
    );
  if (r.events)
    lines.push(
      `operator Events after converge${st ? " and the idle window" : ""} (reason: objects/occurrences): ${Object.entries(
        r.events,
      )
        .map(([reason, t]) => `${reason} ${t.events}/${t.occurrences}`)
        .join(", ")}`,
    );
  if (r.update)
    lines.push(
      `update wave: ${r.update.models} models to a new version in ${r.update.seconds}s (p50 ${r.update.latency.p50}s p99 ${r.update.latency.p99}s); requests/model ${JSON.stringify(r.update.requestsPerModelByVerb)}; CPU ${r.update.cpuMsPerModel} ms/model` +
        (r.update.auditWritesPerModel
          ? `; audit-logged writes/model ${JSON.stringify(r.update.auditWritesPerModel)}`
          : ""),
    );
  if (r.delete) lines.push(`delete all: ${r.delete.seconds}s until every model and child is gone`);
  if (r.memory) {
    const pts = r.memory.points
      .map(
        (p) =>
          `${p.cachedModels}: RSS ${p.rssMiB} MiB heap ${p.heapUsedMiB} MiB` +
          (p.heapTotalMiB !== undefined ? ` of ${p.heapTotalMiB}, external ${p.externalMiB} MiB` : "") +
          (p.settled
            ? ` (${p.settled.seconds}s later: RSS ${p.settled.rssMiB} MiB heap ${p.settled.heapUsedMiB} of ${p.settled.heapTotalMiB}, external ${p.settled.externalMiB} MiB)`
            : ""),
      )
      .join("; ");
    lines.push(`memory: ${pts}; ${r.memory.heapKiBPerModel ?? "?"} KiB heap per cached model`);
    const s = r.memory.storeCost;
    if (s)
      lines.push(
        `  runtime store per MLModel: ${s.withManagedFieldsKiB} KiB with managedFields, ${s.strippedKiB} KiB stripped (${s.objects} objects)`,
      );
    if (r.memory.note) lines.push(`  ${r.memory.note}`);
  }
  return lines.join("\n");
}
