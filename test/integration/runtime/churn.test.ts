/**
 * Watch robustness on a control plane of this file's own (faults would disturb other tests):
 *
 * 1. 410 Gone: the watch connection is cut and held while the API server moves on and etcd
 *    is compacted; on reconnect the server answers 410 and the watcher relists. The cache
 *    ends equal to a fresh list.
 * 2. Churn: thousands of creates/updates/deletes while the API server is restarted (all
 *    watches cut). At the end the cache equals a fresh list, and every key was reconciled
 *    after its last change (the reconciler saw the final resourceVersion, or "gone").
 * 3. Outage: the API server stopped for 12 s under a Manager's caches. Every refused
 *    connection is retried within the 4 s cap (its log says what it chose; before the fix the
 *    waits had doubled to 6.4 s and more by then), and every cache sees writes made after.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import pino from "pino";
import {
  ApiError,
  builtinKinds,
  clientSource,
  defaultUnreachableMaxMs,
  Informer,
  KubeClient,
  type KubeObject,
  Manager,
  type Store,
  type WatcherState,
  type WatchOptions,
  type WatchSource,
} from "../../../src/runtime/index.ts";
import { type PrivateCluster, startPrivateCluster, waitFor } from "../../harness/cluster.ts";

const CM = builtinKinds.ConfigMap;

/** Wraps a real source so the test can cut the watch connection and hold the reconnect. */
function cuttable(inner: WatchSource) {
  let current: AbortController | undefined;
  let gate: Promise<void> = Promise.resolve();
  let open: () => void = () => {};
  const watches: WatchOptions[] = [];
  const source: WatchSource = {
    list: (opts) => inner.list(opts),
    async *watch(opts, signal) {
      await gate;
      watches.push(opts);
      current = new AbortController();
      yield* inner.watch(opts, AbortSignal.any([signal, current.signal]));
    },
  };
  return {
    source,
    watches,
    cut() {
      gate = new Promise((resolve) => {
        open = resolve;
      });
      current?.abort(new Error("connection cut by the test"));
    },
    release: () => open(),
  };
}

async function freshVersions(client: KubeClient, namespace: string): Promise<Map<string, string>> {
  const list = await client.list(CM, { namespace });
  return new Map(list.items.map((o) => [o.metadata.name!, o.metadata.resourceVersion!]));
}

function cacheVersions(store: Store): Map<string, string> {
  return new Map(store.list().map((o) => [o.metadata.name!, o.metadata.resourceVersion!]));
}

function cm(namespace: string, name: string, value: string): KubeObject {
  return { apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace }, data: { value } };
}

/** Retries an API call through outages (connection refused, 5xx); 404/409 are outcomes, not failures. */
async function persist<T>(fn: () => Promise<T>): Promise<T | ApiError> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof ApiError && err.code < 500 && err.code !== 429) return err;
      if (attempt > 600) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

describe("watch robustness (private control plane)", () => {
  let cluster: PrivateCluster;
  let client: KubeClient;

  before(async () => {
    cluster = await startPrivateCluster("rt-churn");
    client = KubeClient.fromKubeConfig(cluster.kubeConfig());
    for (const name of ["gone", "churn", "outage"]) {
      await client.create(builtinKinds.Namespace, {
        apiVersion: "v1",
        kind: "Namespace",
        metadata: { name },
      });
    }
  });
  after(async () => {
    await cluster?.stop();
  });

  it("relists after 410 Gone (etcd compacted while the watch was cut) and requests bookmarks", async (t) => {
    const ns = "gone";
    const cut = cuttable(clientSource(client, CM, { namespace: ns }));
    const errors: unknown[] = [];
    const states: string[] = [];
    const inf = new Informer(cut.source, CM, {
      scope: { namespace: ns },
      watcher: {
        // A freshly started API server can leave a first watch silent; recover quickly.
        inactivityTimeoutMs: 15_000,
        onError: (err) => {
          if (process.env["DEBUG_CHURN"]) console.log("# watch error", String(err));
          errors.push(err);
        },
        onState: (s: WatcherState) => {
          if (process.env["DEBUG_CHURN"]) console.log("# state", JSON.stringify(s));
          states.push(s.kind);
        },
      },
    });
    const ac = new AbortController();
    const run = inf.run(ac.signal);
    t.after(async () => {
      ac.abort();
      await run;
    });
    await inf.waitForSync();
    for (let i = 0; i < 20; i++) await client.create(CM, cm(ns, `c${i}`, "0"));
    // Count ours only: the controller manager adds kube-root-ca.crt to every namespace.
    const ours = () => inf.store.list().filter((o) => /^c\d+$/.test(o.metadata.name!)).length;
    await waitFor("cache has our 20", async () => ours() === 20);
    assert.equal(cut.watches[0]?.allowWatchBookmarks, true, "bookmarks requested");

    cut.cut();
    // Move far past the watch cache window (100 events) and compact etcd.
    for (let round = 1; round <= 8; round++) {
      for (let i = 0; i < 20; i++) await client.replace(CM, cm(ns, `c${i}`, String(round)));
    }
    for (let i = 0; i < 5; i++) await client.delete(CM, { namespace: ns, name: `c${i}` });
    await client.create(CM, cm(ns, "new", "x"));
    await cluster.compactEtcd();
    // The API server's watch cache keeps recent history by time, whatever etcd compacted; a
    // restart starts it empty at the current revision, so our old resourceVersion is too old.
    await cluster.restartApiServer(0);
    const relistsBefore = states.filter((s) => s === "empty").length;
    cut.release();

    const fresh = await freshVersions(client, ns);
    await waitFor("cache equals a fresh list", async () => {
      const c = cacheVersions(inf.store);
      return c.size === fresh.size && [...fresh].every(([k, v]) => c.get(k) === v);
    });
    assert.ok(
      errors.some((e) => e instanceof ApiError && e.code === 410),
      `a 410 Gone was seen: ${errors.map(String).join("; ")}`,
    );
    assert.ok(
      states.filter((s) => s === "empty").length > relistsBefore,
      "the watcher went back to Empty and relisted",
    );
    assert.equal(inf.store.get({ namespace: ns, name: "c0" }), undefined, "deletes during the gap are seen");
  });

  it("survives churn while the API server restarts: cache == fresh list, every key reconciled after its last change", async (t) => {
    const ns = "churn";
    const mgr = new Manager({
      client,
      namespaces: [ns],
      logger: pino({ level: process.env["DEBUG_CHURN"] ? "warn" : "silent" }),
      watcher: { inactivityTimeoutMs: 20_000 },
    });
    const lastSeen = new Map<string, string>();
    let reconciles = 0;
    mgr
      .controller("churn")
      .for(CM)
      .concurrency(4)
      .reconcile(async (ctx) => {
        reconciles++;
        const obj = ctx.cache(CM).get(ctx.request);
        lastSeen.set(ctx.request.name, obj?.metadata.resourceVersion ?? "gone");
      });
    const store = mgr.cache(CM);
    const ac = new AbortController();
    const running = mgr.start(ac.signal);
    t.after(async () => {
      ac.abort();
      await running;
    });

    const names = Array.from({ length: 150 }, (_, i) => `k${i}`);
    const ops = { create: 0, update: 0, delete: 0, rejected: 0 };
    let done = 0;
    const total = 2400;
    let seed = 42;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const worker = async () => {
      while (done < total) {
        done++;
        const name = names[rand(names.length)]!;
        const op = rand(10);
        const r =
          op < 4
            ? await persist(() => client.create(CM, cm(ns, name, String(done))))
            : op < 8
              ? await persist(() =>
                  client.patch(CM, { namespace: ns, name }, { data: { value: String(done) } }, "merge"),
                )
              : await persist(() => client.delete(CM, { namespace: ns, name }));
        if (r instanceof ApiError) ops.rejected++;
        else ops[op < 4 ? "create" : op < 8 ? "update" : "delete"]++;
      }
    };
    const progress = setInterval(() => {
      // Set DEBUG_CHURN=1 to watch the churn go.
      if (process.env["DEBUG_CHURN"])
        console.log(`# progress ${done} ${JSON.stringify(ops)} cache=${store.size} reconciles=${reconciles}`);
    }, 2000);
    const restart = (async () => {
      await waitFor("a third of the churn", async () => done > total / 3, { intervalMs: 50 });
      await cluster.restartApiServer(2000);
    })();
    await Promise.all([...Array.from({ length: 8 }, worker), restart]);
    clearInterval(progress);

    const fresh = await freshVersions(client, ns);
    await waitFor(
      "cache equals a fresh list",
      async () => {
        const c = cacheVersions(store);
        return c.size === fresh.size && [...fresh].every(([k, v]) => c.get(k) === v);
      },
      { timeoutMs: 180_000 },
    );
    await waitFor(
      "every key reconciled after its last change",
      async () =>
        names.every((n) => !lastSeen.has(n) || lastSeen.get(n) === (fresh.get(n) ?? "gone")) &&
        [...fresh.keys()].every((n) => lastSeen.get(n) === fresh.get(n)),
    );
    console.log(
      `# churn: ${JSON.stringify(ops)}; objects at end ${fresh.size}; reconciles ${reconciles}; API server restarted once`,
    );
    assert.ok(ops.create > 0 && ops.update > 0 && ops.delete > 0);
  });

  it("after a 12 s outage every cache retried its refused connections within 4 s each and sees new writes", async (t) => {
    const ns = "outage";
    const lines: {
      msg: string;
      cache?: string;
      retryInMs?: number;
      woken?: number;
      err?: { message?: string };
    }[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const mgr = new Manager({ client, namespaces: [ns], logger, watcher: { inactivityTimeoutMs: 20_000 } });
    const kinds = [CM, builtinKinds.Secret, builtinKinds.Service];
    const stores = kinds.map((k) => mgr.cache(k));
    const ac = new AbortController();
    const running = mgr.start(ac.signal);
    t.after(async () => {
      ac.abort();
      await running;
    });
    await waitFor("caches synced", async () => mgr.cachesSynced());

    await cluster.restartApiServer(12_000);
    await persist(() => client.create(CM, cm(ns, "after", "1")));
    await persist(() =>
      client.create(builtinKinds.Secret, {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { namespace: ns, name: "after" },
      }),
    );
    await persist(() =>
      client.create(builtinKinds.Service, {
        apiVersion: "v1",
        kind: "Service",
        metadata: { namespace: ns, name: "after" },
        spec: { ports: [{ port: 80 }] },
      } as KubeObject),
    );
    await waitFor(
      "every cache has the objects written after the outage",
      async () => stores.every((s) => s.get({ namespace: ns, name: "after" }) !== undefined),
      { timeoutMs: 180_000 },
    );

    const refused = lines.filter(
      (l) => l.msg === "watch error; retrying" && /ECONNREFUSED/.test(l.err?.message ?? ""),
    );
    const woken = lines.filter((l) => l.woken !== undefined).reduce((n, l) => n + (l.woken ?? 0), 0);
    console.log(
      `# outage: ${refused.length} refused connections, waits ${refused.map((l) => Math.round(l.retryInMs ?? -1)).join(" ")} ms; ${woken} waits cut short by another cache's answer`,
    );
    assert.deepEqual(
      [...new Set(refused.map((l) => l.cache))].sort(),
      ["ConfigMap", "Secret", "Service"],
      "every cache met the closed port",
    );
    for (const l of refused) {
      assert.ok(
        (l.retryInMs ?? Infinity) <= defaultUnreachableMaxMs,
        `${l.cache}: retry after a refused connection due within ${defaultUnreachableMaxMs} ms, chose ${l.retryInMs}`,
      );
    }
  });
});
