import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { isAlive } from "../../../src/cluster/binaries.ts";
import { procState, startAgain, startSupervised, stopProcess } from "../../../src/cluster/process.ts";
import {
  exitLine,
  firstRestartDelayMs,
  healthyRunMs,
  maxRestartDelayMs,
  restartDelayMs,
} from "../../../src/cluster/supervise.ts";

describe("restartDelayMs", () => {
  const cases: { name: string; ranForMs: number; previous: number | undefined; want: number }[] = [
    { name: "the first exit", ranForMs: 10, previous: undefined, want: firstRestartDelayMs },
    { name: "a quick exit doubles the delay", ranForMs: 10, previous: 1000, want: 2000 },
    { name: "doubling stops at the cap", ranForMs: 10, previous: maxRestartDelayMs, want: maxRestartDelayMs },
    {
      name: "a healthy run resets it",
      ranForMs: healthyRunMs,
      previous: maxRestartDelayMs,
      want: firstRestartDelayMs,
    },
  ];
  for (const c of cases)
    it(c.name, () => {
      assert.equal(restartDelayMs(c.ranForMs, c.previous), c.want);
    });
});

describe("exitLine", () => {
  it("names the program, how it exited, how long it ran and when it starts again", () => {
    assert.equal(
      exitLine("kube-controller-manager", { code: 1, signal: null }, 72_340, 2000),
      "supervise: kube-controller-manager exited with code 1 after 72.3 s; starting it again in 2 s",
    );
    assert.match(exitLine("x", { code: null, signal: "SIGKILL" }, 5, 1000), /exited on SIGKILL/);
  });
});

/**
 * Whether pid has exited. The supervisor is this process's child: until this process reaps it,
 * it stays a zombie, which isAlive still counts.
 */
function exited(pid: number): boolean {
  if (!isAlive(pid)) return true;
  try {
    return procState(readFileSync(`/proc/${pid}/stat`, "utf8")) === "Z";
  } catch {
    return true;
  }
}

/** The pid the program wrote last, once it has written `count` lines. */
async function programPids(file: string, count: number): Promise<number[]> {
  for (let i = 0; i < 1200; i++) {
    const pids = (readFileSync(file, { encoding: "utf8", flag: "a+" }).match(/\d+/g) ?? []).map(Number);
    if (pids.length >= count) return pids;
    await sleep(50);
  }
  throw new Error(`the program did not start ${count} times: ${readFileSync(file, "utf8")}`);
}

describe("a supervised process", () => {
  const dir = mkdtempSync(join(tmpdir(), "supervise-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("is started again when it exits, and stopped with its supervisor", async () => {
    const pids = join(dir, "pids");
    // Writes its pid, then exits at once on its first run and stays up on the next ones.
    const script = `echo $$ >> ${pids}; [ $(wc -l < ${pids}) -gt 1 ] && exec sleep 300; exit 3`;
    const record = startSupervised("kube-controller-manager", "/bin/sh", ["-c", script], join(dir, "log"));
    try {
      const [first, second] = await programPids(pids, 2);
      assert.ok(first !== second && second !== undefined);
      assert.equal(exited(first!), true);
      assert.equal(exited(second), false);
      assert.match(
        readFileSync(join(dir, "log"), "utf8"),
        /supervise: sh exited with code 3 after .* s; starting it again in 1 s/,
      );
    } finally {
      await stopProcess(record);
    }
    const [, second] = await programPids(pids, 2);
    assert.equal(exited(record.pid), true, "the supervisor is stopped");
    assert.equal(exited(second!), true, "its program is stopped with it");
  });

  it("is started supervised again by startAgain", async () => {
    const record = startSupervised("kube-controller-manager", "/bin/sleep", ["300"], join(dir, "log2"));
    await stopProcess(record);
    const again = startAgain(record);
    try {
      assert.equal(again.group, true);
      assert.deepEqual(again.args, record.args);
      assert.notEqual(again.pid, record.pid);
    } finally {
      await stopProcess(again);
    }
    assert.equal(exited(again.pid), true);
  });
});
