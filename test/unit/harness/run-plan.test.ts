import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { planRun } from "../../harness/run-plan.ts";

describe("planRun: where npm test runs each file", () => {
  const needs: Record<string, string[]> = {
    "unit.test.ts": [],
    "kwok.test.ts": ["cluster"],
    "serve.test.ts": ["cluster", "real-node", "images"],
    "canary-steps.test.ts": ["cluster", "real-node", "live-traffic"],
    "rollout.test.ts": ["cluster", "real-node", "live-traffic"],
    "nodes.test.ts": ["cluster", "own-real-node"],
    "faults.test.ts": ["cluster", "own-real-node", "live-traffic"],
  };
  const plan = planRun(Object.keys(needs), (f) => needs[f] ?? []);

  const cases: { file: string; place: keyof typeof plan }[] = [
    { file: "unit.test.ts", place: "pool" },
    { file: "kwok.test.ts", place: "pool" },
    { file: "serve.test.ts", place: "pool" },
    { file: "canary-steps.test.ts", place: "trafficLane" },
    { file: "rollout.test.ts", place: "trafficLane" },
    { file: "nodes.test.ts", place: "ownNodePhase" },
    // Its own real nodes decide: no run's real node is up for it to share.
    { file: "faults.test.ts", place: "ownNodePhase" },
  ];
  for (const { file, place } of cases)
    it(`${file} (${needs[file]!.join(", ") || "no needs"}) runs in ${place}`, () => {
      const places = (Object.keys(plan) as (keyof typeof plan)[]).filter((p) => plan[p].includes(file));
      assert.deepEqual(places, [place]);
    });

  it("keeps the files' order within each place, and loses none", () => {
    assert.deepEqual(plan.trafficLane, ["canary-steps.test.ts", "rollout.test.ts"]);
    assert.equal(plan.pool.length + plan.trafficLane.length + plan.ownNodePhase.length, 7);
  });
});
