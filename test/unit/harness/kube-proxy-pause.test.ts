import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { procState } from "../../../src/cluster/process.ts";
import { pauseOnSchedule, pauseScheduleRequested } from "../../harness/kube-proxy-pause.ts";

describe("pauseScheduleRequested", () => {
  const env = (value: string) => ({ MLMODEL_TEST_PAUSE_KUBE_PROXY: value });
  it("reads PAUSE/PERIOD in seconds", () => {
    assert.deepEqual(pauseScheduleRequested(env("8/40")), { pauseMs: 8000, periodMs: 40_000 });
    assert.deepEqual(pauseScheduleRequested(env("0.5/2")), { pauseMs: 500, periodMs: 2000 });
  });
  it("is undefined when unset", () => {
    assert.equal(pauseScheduleRequested({}), undefined);
    assert.equal(pauseScheduleRequested(env("")), undefined);
  });
  for (const bad of ["8", "40/8", "0/10", "8/8", "a/b", "-1/4"])
    it(`refuses ${JSON.stringify(bad)}, naming the variable and the form`, () => {
      assert.throws(() => pauseScheduleRequested(env(bad)), /MLMODEL_TEST_PAUSE_KUBE_PROXY=.*PAUSE\/PERIOD/);
    });
});

describe("pauseOnSchedule", () => {
  it("stops the process for the pause, resumes it after, and resumes it on stop", async () => {
    const child = spawn("/bin/sleep", ["30"], { stdio: "ignore" });
    const record = {
      component: "kube-proxy" as const,
      pid: child.pid!,
      binary: "/bin/sleep",
      args: ["30"],
      log: "/dev/null",
    };
    const state = () => procState(readFileSync(`/proc/${child.pid}/stat`, "utf8"));
    const seen = new Set<string>();
    const pauser = pauseOnSchedule([record], { pauseMs: 300, periodMs: 400 }, 60_000);
    try {
      for (let i = 0; i < 40 && pauser.pauses() < 2; i++) {
        seen.add(state() ?? "?");
        await sleep(25);
      }
      assert.ok(pauser.pauses() >= 2, "two pauses began");
      assert.ok(seen.has("T"), `the process was seen stopped (states ${[...seen]})`);
      assert.ok(seen.has("S") || seen.has("R"), `the process was seen running (states ${[...seen]})`);
    } finally {
      await pauser.stop();
    }
    assert.notEqual(state(), "T", "stop resumed it");
    child.kill("SIGKILL");
  });
});
