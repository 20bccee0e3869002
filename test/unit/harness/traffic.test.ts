/** The live-traffic generator and the answer classifier (test/harness/traffic.ts), with fake requests. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { labelRuns, summarize, Traffic, versionClassifier } from "../../harness/traffic.ts";

const ok = (data: number[]) => ({ status: 200, data, body: JSON.stringify({ outputs: [{ data }] }) });

describe("versionClassifier", () => {
  const judge = versionClassifier({ v1: [0, 1], v2: [1, 2] });

  it("labels an answer by the version whose predictions it carries", () => {
    assert.deepEqual(judge(ok([0, 1])), { ok: true, label: "v1" });
    assert.deepEqual(judge(ok([1, 2])), { ok: true, label: "v2" });
  });

  it("fails an answer that matches no version, and a non-200 with the traceback's last line", () => {
    assert.deepEqual(judge(ok([2, 2])), { ok: false, error: "predictions [2,2] match none of v1, v2" });
    assert.deepEqual(
      judge({ status: 500, body: "Traceback (most recent call last):\n  ...\nKeyError: 10\n" }),
      {
        ok: false,
        error: "HTTP 500: KeyError: 10",
      },
    );
  });

  it("refuses versions that answer alike: their answers could not be told apart", () => {
    assert.throws(() => versionClassifier({ v1: [1], v2: [1] }), /v1 and v2 give the same predictions/);
  });
});

describe("summarize and labelRuns", () => {
  it("counts served, failed and labels in send order, with latency percentiles", () => {
    const report = summarize([
      { at: 20, latencyMs: 30, judgement: { ok: true, label: "v2" } },
      { at: 0, latencyMs: 10, judgement: { ok: true, label: "v1" } },
      { at: 10, latencyMs: 20, judgement: { ok: false, error: "refused" } },
    ]);
    assert.deepEqual(
      { ...report, latencyMs: undefined },
      {
        sent: 3,
        served: 2,
        failed: 1,
        dropped: 0,
        byLabel: { v1: 1, v2: 1 },
        failures: [{ at: 10, error: "refused" }],
        latencyMs: undefined,
        durationMs: 50,
        labels: ["v1", "v2"],
      },
    );
    assert.deepEqual(report.latencyMs, { p50: 20, p99: 30, max: 30 });
  });

  it("reduces labels to runs: a clean switch, and a switch with both serving for a while", () => {
    assert.deepEqual(labelRuns(["v1", "v1", "v2", "v2"]), ["v1", "v2"]);
    assert.deepEqual(labelRuns(["v1", "v2", "v1", "v2", "v2"]), ["v1", "v2", "v1", "v2"]);
  });
});

describe("Traffic", () => {
  it("sends at its rate until its bound, whatever the answers, and reports between marks", async () => {
    let n = 0;
    const traffic = new Traffic({
      send: async () => {
        n++;
        if (n === 3) throw new Error("connection reset");
        return ok(n <= 5 ? [0, 1] : [1, 2]);
      },
      judge: versionClassifier({ v1: [0, 1], v2: [1, 2] }),
      ratePerSecond: 200,
      maxRequests: 10,
      maxDurationMs: 60_000,
    }).start();
    traffic.mark("start");
    await traffic.done;
    assert.equal(traffic.running, false, "stopped by itself at maxRequests");
    const report = await traffic.stop();
    assert.equal(report.sent, 10);
    assert.equal(report.failed, 1);
    assert.deepEqual(
      report.failures.map((f) => f.error),
      ["connection reset"],
    );
    assert.deepEqual(report.byLabel, { v1: 4, v2: 5 });
    assert.deepEqual(labelRuns(report.labels), ["v1", "v2"]);
    assert.equal(traffic.report("start").sent, 10);
  });

  it("stops at its time bound and counts the ticks it could not send as dropped", async () => {
    const traffic = new Traffic({
      send: () => new Promise<never>(() => {}),
      judge: () => ({ ok: true, label: "x" }),
      ratePerSecond: 100,
      maxRequests: 1_000,
      maxDurationMs: 200,
      maxInFlight: 2,
    }).start();
    // Every request hangs (a real sender times out): the time bound still stops the sending.
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(traffic.running, false);
    assert.equal(traffic.samples.length, 0);
    const report = traffic.report();
    assert.ok(report.dropped >= 15, `about 20 ticks, 2 sent, the rest dropped: ${report.dropped}`);
  });
});
