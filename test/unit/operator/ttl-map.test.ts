import assert from "node:assert/strict";
import { describe, it, mock } from "node:test";
import { TtlMap } from "../../../src/operator/ttl-map.ts";

describe("TtlMap: what the operator remembers, forgotten in time", () => {
  it("keeps entries in order of setting; a set forgets those that expired, oldest first", () => {
    const map = new TtlMap<string, number>({ ttlMs: 60_000 });
    map.set("a", 1, 0);
    map.set("b", 2, 30_000);
    map.set("a", 3, 40_000);
    assert.deepEqual([...map.keys()], ["b", "a"], "a set re-inserts its key last");
    assert.equal(map.get("a"), 3);
    map.set("c", 4, 95_000);
    assert.deepEqual([...map.keys()], ["a", "c"], "b, set 65 s before, expired");
    map.expire(155_000);
    assert.deepEqual([...map.keys()], [], "expired without a set");
  });

  it("with maxEntries, the least recently set goes when it is full", () => {
    const map = new TtlMap<string, number>({ maxEntries: 2 });
    map.set("a", 1);
    map.set("b", 2);
    map.set("a", 3);
    map.set("c", 4);
    assert.deepEqual([...map.keys()], ["a", "c"]);
  });

  it("an expired entry not yet forgotten is still read: expiry bounds memory only", () => {
    const map = new TtlMap<string, number>({ ttlMs: 1000 });
    map.set("a", 1, 0);
    assert.equal(map.get("a"), 1);
    assert.equal(map.has("a"), true);
    assert.equal(map.delete("a"), true);
    assert.equal(map.size, 0);
  });

  it("expireWhileIdle: entries go by the wall clock though nothing is set again", () => {
    mock.timers.enable({ apis: ["setTimeout", "Date"], now: 1_000_000 });
    try {
      const map = new TtlMap<string, number>({ ttlMs: 60_000, expireWhileIdle: true });
      map.set("a", 1, Date.now());
      mock.timers.tick(30_000);
      map.set("b", 2, Date.now());
      mock.timers.tick(30_000);
      assert.deepEqual([...map.keys()], ["b"], "a expired at its minute; b is 30 s old");
      mock.timers.tick(30_000);
      assert.equal(map.size, 0, "b expired at its own minute");
    } finally {
      mock.timers.reset();
    }
  });
});
