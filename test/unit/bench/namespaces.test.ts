import assert from "node:assert/strict";
import { it } from "node:test";
import { leavingBenchNamespaces } from "../../../bench/operator/bench.ts";

it("a series waits for the bench namespaces being deleted, not for live ones nor other namespaces", () => {
  const at = "2026-11-24T01:00:00Z";
  const leaving = leavingBenchNamespaces([
    { metadata: { name: "bench-op-a1b2c3", deletionTimestamp: at } },
    { metadata: { name: "bench-floor-a1b2c3" } },
    { metadata: { name: "bench-mem-d4e5f6", deletionTimestamp: at } },
    { metadata: { name: "team-bench-x", deletionTimestamp: at } },
    { metadata: { name: "default" } },
  ]);
  assert.deepEqual(leaving, ["bench-op-a1b2c3", "bench-mem-d4e5f6"]);
});
