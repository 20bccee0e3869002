import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { TaskPool } from "../../../bench/operator/floor.ts";

describe("the floor's task pool", () => {
  it("runs tasks pushed before and during the run with bounded workers, and ends once closed and empty", async () => {
    const pool = new TaskPool();
    const order: number[] = [];
    let inFlight = 0;
    let most = 0;
    const task = (n: number) => async () => {
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((r) => setTimeout(r, 2));
      order.push(n);
      inFlight--;
      // A finished first step queues the model's next one, as a completed download Job does.
      if (n < 3) pool.push(task(n + 10));
      if (order.length === 6) pool.close();
    };
    for (const n of [0, 1, 2]) pool.push(task(n));
    await pool.run(2);
    assert.equal(most, 2);
    assert.deepEqual(
      [...order].sort((a, b) => a - b),
      [0, 1, 2, 10, 11, 12],
    );
  });

  it("lets idle workers wait for work instead of ending early", async () => {
    const pool = new TaskPool();
    const done: string[] = [];
    const running = pool.run(3);
    await new Promise((r) => setTimeout(r, 5));
    pool.push(async () => {
      done.push("late");
    });
    pool.close();
    await running;
    assert.deepEqual(done, ["late"]);
  });
});
