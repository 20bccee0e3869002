/** The binomial check of a traffic split (test/harness/share.ts). */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRandom } from "../../harness/random.ts";
import { checkShare, describeShare } from "../../harness/share.ts";

/** How many of n requests reach the canary when each picks it with probability p. */
function simulatedHits(random: () => number, n: number, p: number): number {
  let hits = 0;
  for (let i = 0; i < n; i++) if (random() < p) hits++;
  return hits;
}

describe("checkShare", () => {
  it("is p +/- 3.291 sqrt(p(1-p)/n): 20 % of 2,000 requests is 0.2 +/- 0.029", () => {
    const c = checkShare(400, 2000, 0.2);
    assert.equal(c.halfWidth.toFixed(4), "0.0294");
    assert.equal(c.observed, 0.2);
    assert.equal(c.within, true);
    assert.equal(checkShare(458, 2000, 0.2).within, true, "0.229 is inside");
    assert.equal(checkShare(459, 2000, 0.2).within, false, "0.2295 is outside");
    assert.equal(checkShare(342, 2000, 0.2).within, true, "0.171 is inside");
    assert.equal(checkShare(341, 2000, 0.2).within, false, "0.1705 is outside");
  });

  it("holds about 999 of 1,000 honest splits, and no split that is really another", () => {
    const random = seededRandom(17);
    const runs = 1000;
    let honest = 0;
    let wrong = 0;
    for (let i = 0; i < runs; i++) {
      if (checkShare(simulatedHits(random, 1500, 0.25), 1500, 0.25).within) honest++;
      // 40 % asked of 4 replicas serves 50 %: checked against 40 % it must fail.
      if (checkShare(simulatedHits(random, 1500, 0.5), 1500, 0.4).within) wrong++;
    }
    assert.ok(honest >= 993 && honest <= 1000, `${honest} of ${runs} honest runs inside`);
    assert.equal(wrong, 0, `${wrong} of ${runs} runs of a 50 % split passed as 40 %`);
  });

  it("refuses what it cannot judge, naming the value", () => {
    assert.throws(() => checkShare(1, 0, 0.2), /n must be a positive integer, got 0/);
    assert.throws(() => checkShare(11, 10, 0.2), /hits must be an integer from 0 to n \(10\), got 11/);
    assert.throws(() => checkShare(5, 10, 1), /strictly between 0 and 1 .*got 1/);
    assert.throws(() => checkShare(5, 10, 0), /got 0/);
  });

  it("says what it saw in one line", () => {
    assert.equal(
      describeShare("v2", checkShare(372, 1500, 0.25)),
      "v2 answered 372 of 1500 (24.8 %), split 25.0 % +/- 3.7 % (99.9 %)",
    );
  });
});
