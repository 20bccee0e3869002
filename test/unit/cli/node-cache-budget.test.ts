import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { entriesBudget } from "../../../src/cli/commands/node-cache.ts";

const mi = 1024 * 1024;
const gi = 1024 * mi;

describe("the node cache's budget for entries", () => {
  it("keeps 1% of a large emptyDir for the cache's own files", () => {
    assert.equal(entriesBudget(50 * gi), Math.floor(50 * gi * 0.99));
  });

  it("keeps at least 16 MiB of a small one", () => {
    assert.equal(entriesBudget(100 * mi), 84 * mi);
  });

  it("leaves nothing for an emptyDir smaller than what it keeps", () => {
    assert.ok(entriesBudget(8 * mi) <= 0);
  });
});
