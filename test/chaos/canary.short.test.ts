// test-needs: cluster
/**
 * Short canary chaos inside `npm test` (the long run is `npm run test:chaos -- --only canary`):
 * the operator SIGKILLed after transitions and commands of three canaries in flight, on a
 * private control plane. Counts only: no second canary, no double step, no lost promotion, no
 * orphan (see canary.ts).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { canaryKillScenario } from "./canary.ts";

const log = (line: string) => console.log(`# ${line}`);

describe("chaos (short): operator SIGKILLed at the steps of canaries in flight", () => {
  it("3 canaries through steps, --step and promote across 6 kills: each promoted once, nothing left", async () => {
    const r = await canaryKillScenario({ models: 3, kills: 6, seed: 21, log });
    log(`canary: ${JSON.stringify({ ...r, problems: r.problems.slice(0, 5) })}`);
    assert.equal(r.crashes, 0, "no process exited on its own");
    assert.ok(r.kills >= 4, `the kills landed while the canaries ran: ${r.kills}`);
    assert.ok(r.killsAfterCommand >= 1, "at least one kill right after a promote command");
    assert.deepEqual(
      {
        promoted: r.promoted,
        lostPromotions: r.lostPromotions,
        secondCanaries: r.secondCanaries,
        doubleSteps: r.doubleSteps,
      },
      { promoted: 3, lostPromotions: 0, secondCanaries: 0, doubleSteps: 0 },
      r.problems.join("\n"),
    );
    assert.deepEqual(r.orphans, []);
    assert.deepEqual(r.problems, []);
  });
});
