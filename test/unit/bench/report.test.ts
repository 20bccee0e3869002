import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  benchModel,
  modelNames,
  type OperatorBenchResult,
  pairFigures,
  servesCurrentSpec,
  withPairs,
} from "../../../bench/operator/bench.ts";
import {
  jsonLine,
  readyCurve,
  scalingSeries,
  summary,
  writeResults,
} from "../../../bench/operator/report.ts";
import { mlModelSpecSchema } from "../../../src/api/mlmodel.ts";

const result: OperatorBenchResult = {
  models: 3,
  path: "image",
  operatorSeconds: 4,
  floorSeconds: 2,
  ratio: 2,
  requestsPerModel: 6,
  peakRssMiB: 150,
  concurrency: 2,
  machine: {
    cores: 2,
    memoryGiB: 24,
    cluster: "private local control plane",
    note: "noisy",
    loadAverage: [1, 2, 3],
    operatorNodeOptions: "--max-semi-space-size=2",
  },
  converge: {
    seconds: 4,
    latency: { p50: 2, p90: 3, p99: 3, max: 3 },
    requestsPerModel: 6,
    requestsPerModelByVerb: { apply: 4, create: 2 },
    reconcilesPerModel: 2,
    watchEventsPerModel: { Pod: 3, "MLModel.serving.mlmodel.dev": 2 },
    watchEventsPerModelTotal: 5,
    cpuSeconds: 1,
    cpuMsPerModel: 333.3,
    peakRssMiB: 150,
    lastReadyAt: 1_700_000_000_000,
    loadAverage: 2,
    latencies: [1, 2, 3],
  },
  floor: { seconds: 2, latency: { p50: 1, p90: 2, p99: 2, max: 2 }, latencies: [1, 1, 2] },
};

describe("bench report", () => {
  it("puts the headline fields first in the JSON line and leaves raw latencies out", () => {
    const parsed = JSON.parse(jsonLine(result)) as Record<string, unknown>;
    assert.deepEqual(Object.keys(parsed).slice(0, 6), [
      "models",
      "operatorSeconds",
      "floorSeconds",
      "ratio",
      "requestsPerModel",
      "peakRssMiB",
    ]);
    assert.equal((parsed.converge as Record<string, unknown>).latencies, undefined);
    assert.equal((parsed.converge as Record<string, unknown>).reconcilesPerModel, 2);
  });

  it("says in the summary how many watch events per model the operator received, by cache", () => {
    assert.match(
      summary(result),
      /watch events\/model received by the operator: 5 \{"Pod":3,"MLModel.serving.mlmodel.dev":2\}/,
    );
  });

  it("draws the ready curve from 0 to 100 % at the slowest model", () => {
    const curve = readyCurve([3, 1, 2, 4]);
    assert.deepEqual(curve[0], { x: 0, y: 0 });
    assert.deepEqual(curve.at(-1), { x: 4, y: 100 });
    for (let i = 1; i < curve.length; i++)
      assert.ok(curve[i]!.x >= curve[i - 1]!.x && curve[i]!.y > curve[i - 1]!.y);
  });

  it("writes JSON and one SVG per series, and the scaling plot reads every N's JSON", () => {
    const dir = mkdtempSync(join(tmpdir(), "bench-report-"));
    try {
      writeResults(result, dir);
      writeResults({ ...result, models: 30, operatorSeconds: 9, floorSeconds: 5 }, dir);
      // The download path's files are tagged and stay out of the (image-path) scaling plot.
      writeResults({ ...result, path: "download", models: 30, operatorSeconds: 20, floorSeconds: 10 }, dir);
      assert.deepEqual(readdirSync(dir).sort(), [
        "converge-download-n30.svg",
        "converge-n3.svg",
        "converge-n30.svg",
        "operator-download-n30.json",
        "operator-n3.json",
        "operator-n30.json",
        "phases-download-n30.svg",
        "phases-n3.svg",
        "phases-n30.svg",
        "requests-download-n30.svg",
        "requests-n3.svg",
        "requests-n30.svg",
        "scaling.svg",
      ]);
      const scaling = scalingSeries(dir);
      assert.deepEqual(
        scaling.map((s) => [s.name, s.points]),
        [
          [
            "operator",
            [
              { x: 3, y: 4 },
              { x: 30, y: 9 },
            ],
          ],
          [
            "floor",
            [
              { x: 3, y: 2 },
              { x: 30, y: 5 },
            ],
          ],
        ],
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("bench models", () => {
  it("are valid custom-image MLModels with distinct sortable names", () => {
    const names = modelNames(12);
    assert.equal(new Set(names).size, 12);
    assert.deepEqual([...names].sort(), names);
    const m = benchModel(names[0]!, "ns", "run");
    assert.equal(m.kind, "MLModel");
    for (const field of mlModelSpecSchema.required ?? []) assert.ok(field in m.spec, `spec.${field}`);
    assert.ok(m.spec.image);
    assert.equal(m.spec.model.uri, undefined);
    assert.equal(m.spec.storage, undefined);
  });

  it("download the same image's model from a URI into 1Gi of storage on the download path", () => {
    const m = benchModel("m", "ns", "run", {}, "download");
    assert.equal(m.spec.image, benchModel("m", "ns", "run").spec.image);
    assert.match(m.spec.model.uri ?? "", /^https:\/\//);
    assert.deepEqual(m.spec.storage, { size: "1Gi" });
  });

  it("count as serving only when Ready for the current generation and, if asked, the version", () => {
    const m = benchModel("m", "ns", "run");
    const ready = (status: object, generation = 2) =>
      ({ ...m, metadata: { ...m.metadata, generation }, status }) as typeof m;
    const base = {
      phase: "Ready",
      observedGeneration: 2,
      modelVersion: "2",
      revision: { current: "a", lastReady: "a" },
    };
    assert.equal(servesCurrentSpec(ready(base)), true);
    assert.equal(servesCurrentSpec(ready(base), "2"), true);
    assert.equal(servesCurrentSpec(ready(base), "3"), false);
    assert.equal(servesCurrentSpec(ready({ ...base, observedGeneration: 1 })), false);
    assert.equal(servesCurrentSpec(ready({ ...base, phase: "Deploying" })), false);
    assert.equal(servesCurrentSpec(ready({ ...base, revision: { current: "b", lastReady: "a" } })), false);
  });

  it("takes a run's converge and floor as a pair, in the order they ran", () => {
    const pair = pairFigures(result, 1.5);
    assert.equal(pair?.order, "operator-first");
    assert.equal(pair?.operatorSeconds, 4);
    assert.equal(pair?.floorSeconds, 2);
    assert.equal(pair?.ratio, 2);
    assert.equal(pair?.loadAverage[0], 1.5);
    assert.equal(pairFigures({ ...result, floorFirst: true }, 1)?.order, "floor-first");
    // A run without its floor is no pair.
    const { floor: _floor, ratio: _ratio, ...withoutFloor } = result;
    assert.equal(pairFigures(withoutFloor, 1), undefined);
  });

  it("gives pairs their median ratio and lists every pair in the JSON line and the summary", () => {
    const pair = pairFigures(result, 1)!;
    const pairs = [
      { ...pair, ratio: 1.4 },
      { ...pair, order: "floor-first" as const, ratio: 1.1 },
      { ...pair, ratio: 1.3 },
      { ...pair, order: "floor-first" as const, ratio: 2.0 },
    ];
    const combined = withPairs(result, pairs);
    assert.equal(combined.ratio, 1.35); // (1.3 + 1.4) / 2, not the first run's 2
    assert.equal(combined.operatorSeconds, 4); // the first run's own figures stay
    assert.equal(withPairs(result, pairs.slice(0, 3)).ratio, 1.3);
    const parsed = JSON.parse(jsonLine(combined)) as { ratio: number; pairs: unknown[] };
    assert.equal(parsed.ratio, 1.35);
    assert.equal(parsed.pairs.length, 4);
    assert.match(summary(combined), /floor-first 4\/2 = 1\.1 .*median ratio 1\.35/);
  });
});
