/** The lock between the test processes of one run (test/harness/exclusive.ts). */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { holdLock } from "../../harness/exclusive.ts";
import { scratchDir } from "../../harness/scratch.ts";

/** The pid of a process that has exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], {
    encoding: "utf8",
  });
  return Number(child.stdout);
}

describe("holdLock", () => {
  it("lets one holder in at a time: the second waits until the first releases", async () => {
    const lock = join(scratchDir("lock"), "l");
    const releaseFirst = await holdLock(lock, "first");
    const order: string[] = [];
    let waitedFor = "";
    const second = holdLock(lock, "second", {
      intervalMs: 10,
      onWait: (owner) => {
        waitedFor = owner.holder;
      },
    }).then((release) => {
      order.push("second holds");
      return release;
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    order.push("first releases");
    await releaseFirst();
    const releaseSecond = await second;
    assert.deepEqual(order, ["first releases", "second holds"]);
    assert.equal(waitedFor, "first");
    await releaseSecond();
    assert.equal(existsSync(lock), false, "released: the lock is gone");
  });

  it("takes over a lock whose holder process is gone", async () => {
    const lock = join(scratchDir("lock"), "l");
    mkdirSync(lock);
    writeFileSync(join(lock, "owner.json"), JSON.stringify({ pid: deadPid(), holder: "killed", since: "" }));
    const release = await holdLock(lock, "next", { intervalMs: 10, timeoutMs: 5_000 });
    await release();
  });

  it("gives up after its timeout, naming the holder", async () => {
    const lock = join(scratchDir("lock"), "l");
    const release = await holdLock(lock, "canary-traffic");
    await assert.rejects(
      holdLock(lock, "rollout", { intervalMs: 10, timeoutMs: 50 }),
      new RegExp(`rollout waited too long for .*: held by canary-traffic \\(pid ${process.pid}\\) since `),
    );
    await release();
  });

  it("a release leaves alone a lock another process holds now", async () => {
    const lock = join(scratchDir("lock"), "l");
    const release = await holdLock(lock, "first");
    // Taken over meanwhile (as if this process had been thought dead).
    writeFileSync(
      join(lock, "owner.json"),
      JSON.stringify({ pid: process.ppid, holder: "other", since: "" }),
    );
    await release();
    assert.equal(existsSync(lock), true);
  });
});
