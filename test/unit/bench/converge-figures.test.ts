import assert from "node:assert/strict";
import { it } from "node:test";
import { type ConvergeResult, convergeFigures } from "../../../bench/operator/bench.ts";

it("a converge's figures are one JSON line with everything but the per-model latencies", () => {
  const result: ConvergeResult = {
    seconds: 5560.04,
    latency: { p50: 2000, p90: 4000, p99: 5000 },
    requestsPerModel: 5,
    requestsPerModelByVerb: { apply: 5 },
    reconcilesPerModel: 2,
    watchEventsPerModel: { Pod: 3, "Deployment.apps": 3.1 },
    watchEventsPerModelTotal: 6.1,
    auditWritesPerModelTotal: 5.11,
    cpuSeconds: 120,
    cpuMsPerModel: 12,
    peakRssMiB: 300,
    lastReadyAt: 1_795_000_000_000,
    loadAverage: 14,
    latencies: [1, 2, 3],
  };
  const line = convergeFigures(result);
  assert.doesNotMatch(line, /\n/);
  const { latencies: _, ...expected } = result;
  assert.deepEqual(JSON.parse(line), expected);
});
