/**
 * The operator's Secret cache on the real API server: it lists and watches metadata only, so a
 * Secret's values (and even its keys) never reach the operator's process, but for the copy
 * client-side `kubectl apply` keeps in an annotation, which the cache drops.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { pino } from "pino";
import { modelCaches } from "../../../src/operator/mlmodel/caches.ts";
import {
  builtinKinds,
  type KubeClient,
  type KubeObject,
  Manager,
  metadataOnlySource,
} from "../../../src/runtime/index.ts";
import { createNamespace, type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { adminClient } from "../operator/helpers.ts";

const canary = `canary-${crypto.randomUUID()}`;
// The value of a Secret written by client-side `kubectl apply`, which copies it into an annotation.
const applied = `applied-${crypto.randomUUID()}`;

describe("the operator's Secret cache", () => {
  let ns: TestNamespace;
  let admin: KubeClient;

  before(async () => {
    ns = await createNamespace("e2e-secrets-cache");
    admin = await adminClient();
    await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "creds", namespace: ns.name, labels: { team: "a" } },
      stringData: { AWS_SECRET_ACCESS_KEY: canary },
    } as KubeObject);
    const appliedSecret = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "applied", namespace: ns.name },
      stringData: { token: applied },
    };
    await admin.create(builtinKinds.Secret, {
      ...appliedSecret,
      metadata: {
        ...appliedSecret.metadata,
        annotations: { "kubectl.kubernetes.io/last-applied-configuration": JSON.stringify(appliedSecret) },
      },
    } as KubeObject);
  });

  after(async () => {
    await ns?.delete();
  });

  it("the API server answers a metadata-only list and watch with no value", async () => {
    const source = metadataOnlySource(admin, builtinKinds.Secret, { namespace: ns.name });
    const ac = new AbortController();
    const page = await source.list({ limit: 500, signal: ac.signal });
    const listed = page.items.find((s) => s.metadata.name === "creds");
    assert.deepEqual(listed?.metadata.labels, { team: "a" }, "metadata arrives");
    assert.equal(JSON.stringify(page).includes(canary), false);
    assert.equal(JSON.stringify(page).includes(Buffer.from(canary).toString("base64")), false);
    const events = source.watch({ resourceVersion: page.resourceVersion }, ac.signal);
    await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "later", namespace: ns.name },
      stringData: { token: canary },
    } as KubeObject);
    for await (const event of events) {
      assert.equal(event.type, "ADDED");
      assert.equal(event.object.metadata.name, "later");
      assert.deepEqual(Object.keys(event.object).sort(), ["apiVersion", "kind", "metadata"]);
      assert.equal(event.object.kind, "Secret");
      break;
    }
    ac.abort();
  });

  it("holds a Secret's metadata and owner, never a value nor a key", async () => {
    const secrets = modelCaches.find((c) => c.kind === builtinKinds.Secret);
    assert.ok(secrets, "the controller caches Secrets");
    const mgr = new Manager({ client: admin, namespaces: [ns.name], logger: pino({ level: "silent" }) });
    const store = mgr.cache(secrets.kind, secrets.options);
    const ac = new AbortController();
    const running = mgr.start(ac.signal);
    try {
      const cached = await waitFor("the Secret cache to hold creds", async () =>
        store.get({ namespace: ns.name, name: "creds" }),
      );
      assert.deepEqual(cached.metadata.labels, { team: "a" });
      assert.deepEqual(Object.keys((cached as { data?: object }).data ?? {}), [], "not even the keys");
      const everything = JSON.stringify(store.list());
      assert.ok(store.get({ namespace: ns.name, name: "applied" }), "the applied Secret is cached");
      assert.equal(everything.includes(canary), false);
      assert.equal(everything.includes(applied), false, "kubectl's copy of the applied Secret is dropped");
    } finally {
      ac.abort();
      await running;
    }
  });
});
