import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  autoscaledSplit,
  gatewaySplit,
  observedShares,
  replicaSplit,
  routeWeights,
  stableReplicasDuring,
} from "../../../../src/operator/canary/split.ts";

// [total, percent, stable, canary, effective %, exact]
const fixed: [number, number, number, number, number, boolean][] = [
  [5, 20, 4, 1, 20, true],
  [10, 10, 9, 1, 10, true],
  [10, 25, 7, 3, 30, false], // 2.5 rounds half up
  [3, 10, 2, 1, 33, false], // the canary never gets 0 replicas
  [2, 50, 1, 1, 50, true],
  [2, 90, 1, 1, 50, false], // the stable keeps one below 100 %
  [4, 99, 1, 3, 75, false],
  [1, 20, 1, 1, 50, false], // one replica cannot be split: one of each
  [1, 50, 1, 1, 50, true],
  [7, 100, 0, 7, 100, true],
  [100, 1, 99, 1, 1, true],
  [1000, 37, 630, 370, 37, true],
  [6, 50, 3, 3, 50, true],
  [6, 10, 5, 1, 17, false],
];

describe("replica split with fixed replicas (the total stays spec.replicas)", () => {
  for (const [total, percent, stable, canary, effective, exact] of fixed) {
    it(`${percent}% of ${total}: ${stable} stable + ${canary} canary = ${effective}%${exact ? "" : " (coarse)"}`, () => {
      const split = replicaSplit(total, percent);
      assert.deepEqual(
        { stable: split.stable, canary: split.canary, effective: split.effectivePercent, exact: split.exact },
        { stable, canary, effective, exact },
      );
      assert.equal(split.note === undefined, exact, "a coarse split says why, an exact one says nothing");
      if (total > 1) assert.equal(split.stable + split.canary, total);
    });
  }
  it("says the model is scaled to zero when there is nothing to split", () => {
    const split = replicaSplit(0, 20);
    assert.deepEqual([split.stable, split.canary, split.exact], [0, 0, false]);
    assert.match(split.note ?? "", /scaled to zero/);
  });
  it("names the replicas and the way to a finer split in a coarse note", () => {
    assert.equal(
      replicaSplit(3, 10).note,
      "3 replica(s) cannot carry 10%: 1 of 3 replicas gives 33% (more replicas, or spec.rollout.canary.trafficRouting.gatewayAPI, give a finer split)",
    );
  });
});

// [stable (the autoscaler's count), percent, maxReplicas, canary, effective %, exact]
const autoscaled: [number, number, number, number, number, boolean][] = [
  [4, 20, 10, 1, 20, true], // 4 x 20/80 = 1
  [3, 50, 10, 3, 50, true],
  [8, 20, 10, 2, 20, true],
  [5, 10, 10, 1, 17, false], // 0.56 -> at least 1
  [2, 90, 10, 10, 83, false], // 18 capped at maxReplicas
  [2, 100, 10, 10, 83, false],
];

describe("replica split with autoscaling (the canary on top of the autoscaler's stable count)", () => {
  for (const [stable, percent, max, canary, effective, exact] of autoscaled) {
    it(`${percent}% beside ${stable} stable (max ${max}): ${canary} canary = ${effective}%`, () => {
      const split = autoscaledSplit(stable, percent, max);
      assert.deepEqual(
        { stable: split.stable, canary: split.canary, effective: split.effectivePercent, exact: split.exact },
        { stable, canary, effective, exact },
      );
    });
  }
  it("leaves a model scaled to zero unsplit", () => {
    assert.deepEqual([autoscaledSplit(0, 20, 5).canary, autoscaledSplit(0, 20, 5).stable], [0, 0]);
  });
});

// [total, percent, stable, canary]
const gateway: [number, number, number, number][] = [
  [10, 10, 10, 1],
  [10, 15, 10, 2], // ceil: enough replicas for the share
  [3, 1, 3, 1],
  [4, 100, 4, 4],
  [1, 50, 1, 1],
];

describe("Gateway API split (exact weights; the stable keeps every replica)", () => {
  for (const [total, percent, stable, canary] of gateway) {
    it(`${percent}% of ${total}: stable ${stable}, canary ${canary}, exact`, () => {
      const split = gatewaySplit(total, percent);
      assert.deepEqual(
        [split.stable, split.canary, split.effectivePercent, split.exact],
        [stable, canary, percent, true],
      );
    });
  }
  it("cannot split a model scaled to zero", () => {
    assert.equal(gatewaySplit(0, 10).exact, false);
  });
});

describe("the stable hands over one replica per ready canary replica", () => {
  // [total, percent, ready canary replicas, stable replicas]
  const cases: [number, number, number, number][] = [
    [5, 20, 0, 5],
    [5, 20, 1, 4],
    [5, 20, 3, 4], // never below the split
    [10, 30, 2, 8],
    [1, 20, 1, 1], // one replica: the stable keeps it
    [4, 100, 0, 4],
    [4, 100, 2, 2],
    [4, 100, 4, 0],
  ];
  for (const [total, percent, ready, stable] of cases) {
    it(`${percent}% of ${total} with ${ready} canary ready: stable ${stable}`, () => {
      assert.equal(stableReplicasDuring(replicaSplit(total, percent), total, ready), stable);
    });
  }
});

describe("route weights and observed shares", () => {
  it("gives the canary its weight only once all its replicas are ready", () => {
    assert.deepEqual(routeWeights(10, 0, 1), { stable: 100, canary: 0 });
    assert.deepEqual(routeWeights(10, 1, 2), { stable: 100, canary: 0 });
    assert.deepEqual(routeWeights(10, 2, 2), { stable: 90, canary: 10 });
    assert.deepEqual(routeWeights(10, 0, 0), { stable: 100, canary: 0 });
  });
  it("reads the share from ready replicas by replicas and from the weights by route", () => {
    assert.deepEqual(observedShares("Replicas", { stable: 4, canary: 1 }), { stable: 80, canary: 20 });
    assert.deepEqual(observedShares("Replicas", { stable: 2, canary: 1 }), { stable: 67, canary: 33 });
    assert.deepEqual(observedShares("Replicas", { stable: 3, canary: 0 }), { stable: 100, canary: 0 });
    assert.deepEqual(observedShares("Replicas", { stable: 0, canary: 0 }), { stable: 0, canary: 0 });
    assert.deepEqual(observedShares("GatewayAPI", { stable: 9, canary: 1 }, { stable: 90, canary: 10 }), {
      stable: 90,
      canary: 10,
    });
  });
});
