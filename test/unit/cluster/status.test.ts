import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { judgeHealth } from "../../../src/cluster/cluster.ts";
import { prometheusReadyUrl } from "../../../src/cluster/prometheus.ts";

const prometheus = { component: "prometheus" as const, pid: 4242, log: "/c/logs/prometheus.log" };
const ready = prometheusReadyUrl("http://127.0.0.1:40123");

describe("cluster status: judging a component's health", () => {
  it("Prometheus that answers its /-/ready is healthy, shown by its URL", () => {
    assert.equal(ready, "http://127.0.0.1:40123/-/ready");
    assert.deepEqual(
      judgeHealth(prometheus, {
        running: true,
        url: ready,
        answer: { code: 200, body: "Prometheus Server is Ready.\n" },
      }),
      { component: "prometheus", pid: 4242, running: true, healthy: true, detail: ready },
    );
  });

  it("Prometheus still starting (503) or not answering is unhealthy, with the code and the URL asked", () => {
    const starting = judgeHealth(prometheus, {
      running: true,
      url: ready,
      answer: { code: 503, body: "Service Unavailable" },
    });
    assert.equal(starting.healthy, false);
    assert.equal(starting.detail, `unhealthy: HTTP 503 from ${ready}`);
    const silent = judgeHealth(prometheus, { running: true, url: ready, answer: { code: 0, body: "" } });
    assert.equal(silent.healthy, false);
    assert.equal(silent.detail, `unhealthy: HTTP no answer from ${ready}`);
  });

  it("Prometheus running without a recorded URL is not called healthy: it cannot be asked", () => {
    const unknown = judgeHealth(prometheus, { running: true });
    assert.equal(unknown.healthy, false);
    assert.equal(unknown.running, true);
    assert.match(unknown.detail, /URL is not recorded.*prometheus\.log/);
  });

  it("a stopped component is unhealthy and names its log, whatever its endpoint would say", () => {
    const stopped = judgeHealth(prometheus, { running: false, url: ready });
    assert.deepEqual(stopped, {
      component: "prometheus",
      pid: 4242,
      running: false,
      healthy: false,
      detail: "not running (log: /c/logs/prometheus.log)",
    });
  });

  it("a component without a health endpoint (the provisioner) is healthy while it runs", () => {
    const provisioner = { component: "local-path-provisioner" as const, pid: 7, log: "/c/logs/p.log" };
    assert.deepEqual(judgeHealth(provisioner, { running: true }), {
      component: "local-path-provisioner",
      pid: 7,
      running: true,
      healthy: true,
      detail: "running",
    });
  });

  it("etcd is healthy only when its /health body says so", () => {
    const etcd = { component: "etcd" as const, pid: 1, log: "/c/logs/etcd.log" };
    const url = "https://127.0.0.1:2379/health";
    assert.equal(
      judgeHealth(etcd, { running: true, url, answer: { code: 200, body: '{"health":"true","reason":""}' } })
        .healthy,
      true,
    );
    const unhealthy = judgeHealth(etcd, {
      running: true,
      url,
      answer: { code: 200, body: '{"health":"false","reason":"NOSPACE"}' },
    });
    assert.equal(unhealthy.healthy, false);
    assert.equal(unhealthy.detail, `unhealthy: HTTP 200 from ${url}`);
  });
});
