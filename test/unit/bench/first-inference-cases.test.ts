import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type CaseResult,
  casePlan,
  caseTable,
  nextRunFits,
  parseStorageModes,
  splitMilestones,
} from "../../../bench/realnode/first-inference-cases.ts";

describe("first inference across storage modes", () => {
  it("reads --storage as a list of known modes, naming the flag, the value and the modes when wrong", () => {
    assert.deepEqual(parseStorageModes("Claim,NodeCache"), ["Claim", "NodeCache"]);
    assert.deepEqual(parseStorageModes("NodeCache"), ["NodeCache"]);
    assert.throws(
      () => parseStorageModes("Claim,nodecache"),
      /--storage "Claim,nodecache": "nodecache" is not a storage mode; give Claim, NodeCache/,
    );
    assert.throws(() => parseStorageModes(""), /--storage "" names no mode/);
    assert.throws(() => parseStorageModes("Claim,Claim"), /names a mode twice/);
  });

  it("runs each mode cold then warm, alternating which mode goes first from one group to the next", () => {
    const plan = casePlan(2, [1, 3], ["Claim", "NodeCache"]);
    assert.equal(plan.length, 2 * 2 * 2 * 2);
    const brief = plan.map((c) => `${c.run}/${c.replicas}/${c.storage}/${c.cache}`);
    assert.deepEqual(brief.slice(0, 8), [
      "1/1/Claim/cold",
      "1/1/Claim/warm",
      "1/1/NodeCache/cold",
      "1/1/NodeCache/warm",
      "1/3/NodeCache/cold",
      "1/3/NodeCache/warm",
      "1/3/Claim/cold",
      "1/3/Claim/warm",
    ]);
    // The next run goes on alternating: Claim first again for 1 replica.
    assert.deepEqual(
      plan.filter((c) => c.run === 2 && c.cache === "cold").map((c) => `${c.replicas}/${c.storage}`),
      ["1/Claim", "1/NodeCache", "3/NodeCache", "3/Claim"],
    );
    // With one replica count the order still alternates run by run.
    const single = casePlan(2, [3], ["Claim", "NodeCache"]).filter((c) => c.cache === "cold");
    assert.deepEqual(
      single.map((c) => c.storage),
      ["Claim", "NodeCache", "NodeCache", "Claim"],
    );
    assert.deepEqual(
      casePlan(1, [1], ["NodeCache"]).map((c) => c.cache),
      ["cold", "warm"],
    );
  });

  it("starts another run only while the longest run so far still fits the budget", () => {
    assert.equal(nextRunFits(999_999, [], 1), true, "the first run always starts");
    assert.equal(nextRunFits(600_000, [300_000, 400_000], 1_000_000), true);
    assert.equal(nextRunFits(600_001, [300_000, 400_000], 1_000_000), false);
  });

  it("splits the milestones into the series' figures and names any never seen", () => {
    const split = splitMilestones({
      downloaded: 8_600,
      running: 9_440,
      ready: 19_620,
      allReady: 21_030,
      answered: 19_760,
      statusReady: 19_700,
    });
    assert.deepEqual(split, {
      downloadS: 8.6,
      podStartS: 0.8,
      modelLoadS: 10.2,
      readinessS: 0.1,
      totalS: 19.8,
      allReadyS: 21,
      statusReadyS: 19.7,
    });
    assert.throws(
      () => splitMilestones({ downloaded: 1, running: 2, ready: 3, answered: 4 }),
      /milestones never seen: allReady, statusReady/,
    );
  });

  it("tabulates medians per mode, replicas and cache, Claim before NodeCache and cold before warm", () => {
    const result = (
      storage: CaseResult["storage"],
      cache: CaseResult["cache"],
      run: number,
      totalS: number,
      originBytes: number,
    ): CaseResult => ({
      run,
      replicas: 3,
      storage,
      cache,
      downloadS: totalS / 2,
      podStartS: 1,
      modelLoadS: 2,
      readinessS: 0.1,
      totalS,
      allReadyS: totalS + 1,
      statusReadyS: totalS,
      originBytes,
      podNodes: storage === "Claim" ? 1 : 3,
      wrongAnswers: 0,
      loadStart: 1,
      loadEnd: 2,
      startedAt: "2026-11-28T03:00:00.000Z",
    });
    const table = caseTable([
      result("NodeCache", "warm", 1, 10, 0),
      result("NodeCache", "cold", 1, 20, 4000),
      result("Claim", "warm", 1, 20, 4000),
      result("Claim", "cold", 1, 22, 4000),
      result("NodeCache", "warm", 2, 12, 0),
      result("NodeCache", "cold", 2, 24, 4000),
      result("Claim", "warm", 2, 24, 4000),
      result("Claim", "cold", 2, 26, 4000),
    ]);
    assert.equal(table.length, 5);
    assert.match(table[0]!, /^storage \| replicas \| cache \| total s median/);
    assert.deepEqual(
      table.slice(1).map((row) => row.split(" | ").slice(0, 4).join(" | ")),
      [
        "Claim | 3 | cold | 24 (22, 26)",
        "Claim | 3 | warm | 22 (20, 24)",
        "NodeCache | 3 | cold | 22 (20, 24)",
        "NodeCache | 3 | warm | 11 (10, 12)",
      ],
    );
    assert.match(table[4]!, /\| 0 \| 3$/, "NodeCache warm: 0 origin bytes, pods on 3 nodes");
    assert.match(table[1]!, /\| 4000 \| 1$/, "Claim: the bytes again, pods on 1 node");
  });
});
