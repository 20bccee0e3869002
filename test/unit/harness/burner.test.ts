import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { burnCores, burnersRequested } from "../../harness/burner.ts";

describe("CPU burners", () => {
  it("reads the count from MLMODEL_TEST_BURN_CORES, none when unset", () => {
    assert.equal(burnersRequested({}), 0);
    assert.equal(burnersRequested({ MLMODEL_TEST_BURN_CORES: "2" }), 2);
    assert.throws(
      () => burnersRequested({ MLMODEL_TEST_BURN_CORES: "two" }),
      /MLMODEL_TEST_BURN_CORES="two": expected a whole number of burners from 0 to 64/,
    );
  });

  it("ends each burner by itself at its bound", async () => {
    const burners = burnCores(2, 200);
    assert.deepEqual(await burners.exits, [0, 0], "both loops returned on their own");
    await burners.stop();
  });

  it("stops burners early on request", async () => {
    const burners = burnCores(1, 10 * 60_000);
    await burners.stop();
    assert.deepEqual(await burners.exits, ["SIGKILL"]);
  });

  it("rejects a bound that is not a positive whole number of milliseconds", () => {
    assert.throws(() => burnCores(1, 0), /burnCores maxMs=0: expected a positive whole number/);
  });
});
