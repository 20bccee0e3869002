import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { auditOffset, countWrites, writesSince } from "../../../bench/lib/audit.ts";
import { parseCpuSeconds, parseStatusKiB } from "../../../bench/lib/proc.ts";
import { diff, parsePrometheus, sumBy, total } from "../../../bench/lib/prometheus.ts";
import { inParallel, median, percentile, percentiles } from "../../../bench/lib/stats.ts";
import { barChart, lineChart, niceMax } from "../../../bench/lib/svg.ts";
import { imageNodeOptions } from "../../../bench/operator/process.ts";

describe("percentiles", () => {
  it("takes the median of an odd count as its middle and of an even count as the middle two's mean", () => {
    assert.equal(median([]), undefined);
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
  });

  it("uses the nearest rank", () => {
    const xs = Array.from({ length: 100 }, (_, i) => 100 - i); // 100..1, unsorted
    assert.equal(percentile(xs, 50), 50);
    assert.equal(percentile(xs, 99), 99);
    assert.equal(percentile(xs, 100), 100);
    assert.equal(percentile(xs, 0), 1);
    assert.equal(percentile([], 50), undefined);
    assert.deepEqual(percentiles([3, 1, 2]), { p50: 2, p90: 3, p99: 3, max: 3 });
    assert.throws(() => percentile(xs, 101), RangeError);
  });

  it("runs tasks with a bounded number in flight, each once", async () => {
    let inFlight = 0;
    let most = 0;
    const seen: number[] = [];
    await inParallel([1, 2, 3, 4, 5, 6, 7], 3, async (x) => {
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((r) => setTimeout(r, 5));
      seen.push(x);
      inFlight--;
    });
    assert.equal(most, 3);
    assert.deepEqual(
      seen.sort((a, b) => a - b),
      [1, 2, 3, 4, 5, 6, 7],
    );
  });
});

describe("Prometheus text", () => {
  const text = [
    "# HELP rest_client_requests_total Number of HTTP requests",
    "# TYPE rest_client_requests_total counter",
    'rest_client_requests_total{code="200",method="GET",verb="list"} 12',
    'rest_client_requests_total{code="200",method="PATCH",verb="apply"} 7',
    'rest_client_requests_total{code="409",method="PATCH",verb="apply"} 1',
    'controller_runtime_reconcile_total{controller="mlmodel",result="success"} 30',
    'controller_runtime_reconcile_total{controller="mlmodel",result="error"} 2',
    'odd_label{msg="a \\"quoted\\" value"} 1',
    "nodejs_heap_size_used_bytes 1048576",
  ].join("\n");
  const samples = parsePrometheus(text);

  it("sums a counter by one label and reads gauges", () => {
    assert.deepEqual(sumBy(samples, "rest_client_requests_total", "verb"), { list: 12, apply: 8 });
    assert.equal(total(samples, "controller_runtime_reconcile_total"), 32);
    assert.equal(total(samples, "nodejs_heap_size_used_bytes"), 1048576);
    assert.equal(total(samples, "absent_metric"), 0);
    assert.equal(samples.find((s) => s.name === "odd_label")?.labels.msg, 'a "quoted" value');
  });

  it("diffs two snapshots, keeping keys of either side and dropping zeros", () => {
    assert.deepEqual(diff({ apply: 10, list: 3, create: 2 }, { apply: 4, list: 3, watch: 1 }), {
      apply: 6,
      create: 2,
      watch: -1,
    });
  });
});

describe("audit log", () => {
  const user = "system:serviceaccount:mlmodel-system:mlmodel-operator";
  const event = (
    verb: string,
    resource: string,
    subresource?: string,
    username = user,
    at = "2026-01-01T00:00:00.000000Z",
  ) =>
    JSON.stringify({
      stage: "ResponseComplete",
      verb,
      user: { username },
      objectRef: { resource, ...(subresource ? { subresource } : {}) },
      requestReceivedTimestamp: at,
    });

  it("counts one user's writes by verb and resource, ignoring others and a torn last line", () => {
    const lines = [
      event("patch", "deployments"),
      event("patch", "mlmodels", "status"),
      event("patch", "mlmodels", "status"),
      event("create", "events"),
      event("create", "pods", undefined, "system:kube-controller-manager"),
      event("get", "pods"), // not a write (the local policy logs writes only; a wider one would not)
      `{"stage":"ResponseComplete","verb":"patch","user":{"username":"${user}"`,
    ].join("\n");
    const writes = countWrites(lines, user);
    assert.equal(writes.total, 4);
    assert.deepEqual(writes.byVerbResource, {
      "patch deployments": 1,
      "patch mlmodels/status": 2,
      "create events": 1,
    });
  });

  it("counts only the writes received within a window, and says when the last one came", () => {
    const at = (s: number) => `2026-01-01T00:00:${String(s).padStart(2, "0")}.500000Z`;
    const lines = [
      event("create", "events", undefined, user, at(1)),
      event("patch", "events", undefined, user, at(5)),
      event("patch", "events", undefined, user, at(9)),
      event("patch", "events", undefined, user, at(10)),
    ].join("\n");
    const t = (s: number) => Date.parse(`2026-01-01T00:00:${String(s).padStart(2, "0")}Z`);
    const window = countWrites(lines, user, { fromMs: t(5), toMs: t(10) });
    assert.deepEqual(window.byVerbResource, { "patch events": 2 });
    assert.equal(window.lastAt, t(9) + 500);
    assert.equal(countWrites(lines, user, { fromMs: t(10) }).total, 1);
    assert.equal(countWrites(lines, user).total, 4);
  });

  it("follows a rotation: the writes after the mark in the renamed log, then the new log's", () => {
    const dir = mkdtempSync(join(tmpdir(), "mlmodel-audit-"));
    try {
      const log = join(dir, "audit.log");
      writeFileSync(log, `${event("patch", "deployments")}\n`);
      const mark = auditOffset(log);
      appendFileSync(log, `${event("patch", "services")}\n`);
      // As kube-apiserver rotates (--audit-log-maxsize): renamed beside it, a new file begun.
      renameSync(log, join(dir, "audit-2026-01-01T00-00-01.000.log"));
      writeFileSync(log, `${event("patch", "mlmodels", "status")}\n`);
      const writes = writesSince(log, mark, user);
      assert.deepEqual(writes.byVerbResource, { "patch services": 1, "patch mlmodels/status": 1 });
      appendFileSync(log, `${event("patch", "deployments")}\n`);
      assert.equal(writesSince(log, auditOffset(log), user).total, 0, "nothing since a mark taken now");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("/proc parsing", () => {
  it("reads utime+stime after a command name with spaces and parens", () => {
    const stat = "4242 (node (bench) x) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0";
    assert.equal(parseCpuSeconds(stat), 4);
  });

  it("reads kB fields of /proc/PID/status in MiB", () => {
    const status = "Name:\tnode\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n";
    assert.equal(parseStatusKiB(status, "VmRSS"), 100);
    assert.equal(parseStatusKiB(status, "VmHWM"), 200);
    assert.throws(() => parseStatusKiB(status, "VmSwap"), /VmSwap/);
  });
});

describe("SVG charts", () => {
  it("rounds axes up to 1, 2 or 5 times a power of ten", () => {
    assert.equal(niceMax(0), 1);
    assert.equal(niceMax(7), 10);
    assert.equal(niceMax(13), 20);
    assert.equal(niceMax(430), 500);
    assert.equal(niceMax(1000), 1000);
  });

  it("draws one bar per value with escaped labels", () => {
    const svg = barChart("a <title>", "y", [
      { label: "apply", value: 4 },
      { label: "create", value: 2 },
    ]);
    assert.equal(svg.match(/<rect x=/g)?.length, 2);
    assert.ok(svg.includes("a &lt;title&gt;"));
    assert.ok(svg.startsWith("<svg"));
  });

  it("draws one polyline per series with its points in the plot area", () => {
    const svg = lineChart("t", "x", "y", [
      {
        name: "operator",
        points: [
          { x: 0, y: 0 },
          { x: 10, y: 100 },
        ],
      },
      {
        name: "floor",
        points: [
          { x: 0, y: 0 },
          { x: 5, y: 100 },
        ],
      },
    ]);
    const lines = [...svg.matchAll(/points="([^"]+)"/g)].map((m) => m[1]!);
    assert.equal(lines.length, 2);
    for (const l of lines)
      for (const pair of l.split(" ")) {
        const [x, y] = pair.split(",").map(Number);
        assert.ok(x! >= 70 && x! <= 620 && y! >= 40 && y! <= 290, `${pair} inside the plot`);
      }
  });
});

describe("the operator's Node options", () => {
  it("are the image's NODE_OPTIONS, read from the Dockerfile", () => {
    assert.equal(imageNodeOptions('FROM x\nENV NODE_OPTIONS="--a=1 --b"\nUSER 1\n'), "--a=1 --b");
    assert.equal(imageNodeOptions("FROM x\n"), "");
    assert.match(imageNodeOptions(), /--max-semi-space-size=\d+/, "the repository's Dockerfile sets them");
  });
});
