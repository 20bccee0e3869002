// Restarting one component of a cluster: which record names it, how the records change, and the
// environment the new process gets. The restarts themselves are proven on a real node
// (test/e2e/realnode/control-plane-faults.test.ts).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type ProcessRecord, procState } from "../../../src/cluster/process.ts";
import {
  isNodeComponent,
  recordOf,
  replaceRecord,
  restartEnvironment,
} from "../../../src/cluster/restart.ts";

const record = (component: ProcessRecord["component"], pid: number): ProcessRecord => ({
  component,
  pid,
  binary: `/bin/${component}`,
  args: [`--${component}`],
  log: `/logs/${component}.log`,
});

describe("restarting a component", () => {
  const records = [record("containerd", 10), record("kubelet", 11), record("kube-proxy", 12)];

  it("finds the one record of the component", () => {
    assert.equal(recordOf(records, "kubelet", "the journal").pid, 11);
  });

  it("names what the records hold when the component is missing", () => {
    assert.throws(
      () => recordOf(records, "etcd", "the journal in /d"),
      /the journal in \/d lists no etcd process \(it lists containerd, kubelet, kube-proxy\)/,
    );
  });

  it("refuses to pick one of several (a fleet's kubelets)", () => {
    assert.throws(
      () => recordOf([...records, record("kubelet", 21)], "kubelet", "the state"),
      /the state lists 2 kubelet processes \(pids 11, 21\)/,
    );
  });

  it("replaces the record in place, keeping the start order teardown relies on", () => {
    const next = { ...record("kubelet", 99) };
    const replaced = replaceRecord(records, records[1]!, next);
    assert.deepEqual(
      replaced.map((r) => [r.component, r.pid]),
      [
        ["containerd", 10],
        ["kubelet", 99],
        ["kube-proxy", 12],
      ],
    );
    assert.equal(records[1]!.pid, 11, "the given records are left as they were");
  });

  it("gives containerd the node's pull proxy and lets every other component inherit", () => {
    const env = restartEnvironment("containerd", { PATH: "/bin", https_proxy: "http://elsewhere" });
    assert.equal(env?.PATH, "/bin");
    assert.notEqual(env?.https_proxy, "http://elsewhere");
    assert.equal(env?.https_proxy, env?.HTTPS_PROXY);
    assert.equal(restartEnvironment("kubelet", { PATH: "/bin" }), undefined);
  });

  it("knows the real node's components from the control plane's", () => {
    assert.deepEqual(
      (["kubelet", "containerd", "kube-proxy", "etcd", "kube-apiserver"] as const).map(isNodeComponent),
      [true, true, true, false, false],
    );
  });
});

describe("a stopped process that its parent has not reaped", () => {
  it("reads the state letter after the command, whatever the command's name holds", () => {
    assert.equal(procState("30323 (kubelet) Z 20131 30323 30323 0 -1 4228164"), "Z");
    assert.equal(procState("42 (a (b) c) S 1 42 42 0 -1"), "S");
    assert.equal(procState(""), undefined);
  });
});
