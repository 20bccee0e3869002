/**
 * Leader election between manager processes on the real control plane: exactly one
 * reconciles; SIGKILL of the leader hands over after the lease expires; a leader whose lease
 * is taken stops reconciling and exits; SIGTERM drains and releases the lease.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { builtinKinds, KubeClient, type Lease, microTime } from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";

interface Child {
  proc: ChildProcess;
  events: { event: string; name?: string; at: number }[];
  has(event: string): boolean;
  reconciled(): string[];
}

function startChild(ns: string, identity: string): Child {
  const proc = spawn(process.execPath, [new URL("./fixtures/leader-child.ts", import.meta.url).pathname], {
    env: { ...process.env, NS: ns, IDENTITY: identity },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const events: Child["events"] = [];
  createInterface({ input: proc.stdout! }).on("line", (line) => {
    try {
      events.push({ ...(JSON.parse(line) as { event: string; name?: string }), at: Date.now() });
    } catch {
      // not ours
    }
  });
  return {
    proc,
    events,
    has: (e) => events.some((x) => x.event === e),
    reconciled: () => events.filter((x) => x.event === "reconcile").map((x) => x.name!),
  };
}

describe("leader election (real control plane, separate processes)", () => {
  const client = KubeClient.fromKubeConfig(kubeConfig());
  let ns: TestNamespace;
  const children: Child[] = [];

  before(async () => {
    ns = await createNamespace("rt-leader");
  });
  after(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill("SIGKILL");
    await ns.delete();
  });

  const leaseOf = () => client.get<Lease>(builtinKinds.Lease, { namespace: ns.name, name: "rt-leader" });

  it("one leader reconciles; kill -9 hands over; a deposed leader stops; SIGTERM releases", async () => {
    const a = startChild(ns.name, "a");
    children.push(a);
    await waitFor("a leads", async () => a.has("leading"));
    const b = startChild(ns.name, "b");
    children.push(b);
    await waitFor("b synced (standby)", async () => b.has("synced"));

    const names = ["one", "two", "three", "four", "five"];
    for (const name of names) {
      await client.create(builtinKinds.ConfigMap, {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name, namespace: ns.name },
      });
    }
    await waitFor("a reconciled all", async () => names.every((n) => a.reconciled().includes(n)));
    assert.deepEqual(b.reconciled(), [], "the standby does not reconcile");
    assert.equal((await leaseOf())?.spec?.holderIdentity, "a");

    const killedAt = Date.now();
    a.proc.kill("SIGKILL");
    await waitFor("b leads after a was killed", async () => b.has("leading"), { timeoutMs: 90_000 });
    const handoverMs = b.events.find((e) => e.event === "leading")!.at - killedAt;
    console.log(`# leader handover after SIGKILL: ${handoverMs} ms (lease 15 s, retry 2 s)`);
    await waitFor("b reconciled all after taking over", async () =>
      names.every((n) => b.reconciled().includes(n)),
    );

    // Depose b: someone else takes the lease (as a partitioned leader would find on return).
    const lease = (await leaseOf())!;
    await client.replace(builtinKinds.Lease, {
      ...lease,
      spec: {
        ...lease.spec,
        holderIdentity: "intruder",
        renewTime: microTime(Date.now()),
        leaseDurationSeconds: 15,
      },
    });
    const [code] = (await once(b.proc, "exit")) as [number];
    assert.equal(code, 3, "a deposed leader exits non-zero");
    assert.ok(b.has("lost"));
    const lostAt = b.events.findIndex((e) => e.event === "lost");
    assert.ok(
      !b.events.slice(lostAt).some((e) => e.event === "reconcile"),
      "no reconcile after losing the lease",
    );

    // A new candidate waits out the intruder's lease, leads, and on SIGTERM releases the lease.
    const c = startChild(ns.name, "c");
    children.push(c);
    await waitFor("c leads after the intruder's lease expired", async () => c.has("leading"), {
      timeoutMs: 90_000,
    });
    c.proc.kill("SIGTERM");
    const [cCode] = (await once(c.proc, "exit")) as [number];
    assert.equal(cCode, 0);
    assert.ok(c.has("stopped"));
    assert.equal((await leaseOf())?.spec?.holderIdentity, undefined, "lease released on SIGTERM");
  });
});
