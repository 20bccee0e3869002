// The glue that creates URI Secrets, against a recording fake client and cache.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { servingPodTemplate } from "../../../src/operator/desired.ts";
import { childNames, labels } from "../../../src/operator/names.ts";
import { planModel } from "../../../src/operator/plan.ts";
import { ensureUriSecrets, missingUriSecret } from "../../../src/operator/uri-secret.ts";
import { ApiError, type KubeObject, type ReconcileContext, type Store } from "../../../src/runtime/index.ts";
import { model, tfServing } from "./fixtures.ts";

const tf = { ref: "ClusterServingRuntime/tensorflow-serving", spec: tfServing.spec };
const signed = "https://b.s3.amazonaws.com/m.tgz?X-Amz-Signature=abc";

function store(objects: KubeObject[]): Store<KubeObject> {
  const get = (key: { namespace?: string; name: string }) =>
    objects.find((o) => o.metadata.name === key.name && o.metadata.namespace === key.namespace);
  return { get, list: () => objects, byIndex: () => [] } as unknown as Store<KubeObject>;
}

/** A reconcile context whose client records creates (and answers `answer`), with cached Secrets. */
function fakeContext(secrets: KubeObject[], answer?: ApiError) {
  const created: KubeObject[] = [];
  const ctx = {
    signal: new AbortController().signal,
    log: { info: () => {} },
    cache: () => store(secrets),
    client: {
      create: async (_kind: unknown, obj: KubeObject) => {
        if (answer) throw answer;
        created.push(obj);
        return obj;
      },
    },
  } as unknown as ReconcileContext;
  return { ctx, created };
}

// Each test its own namespace: the expectations outlive a reconcile, keyed by namespace/name.
function setup(namespace: string, uri = signed) {
  const m = model({ model: { uri, format: "tensorflow" } });
  m.metadata.namespace = namespace;
  const plan = planModel(m, tf);
  const hash = servingPodTemplate(plan).revision;
  const revision: V1ControllerRevision = {
    metadata: { name: `resnet-${hash}`, uid: "rev-uid", labels: { [labels.revision]: hash } },
    revision: 1,
  };
  return { m, plan, revision, name: childNames.uriSecret("resnet", hash) };
}

describe("ensureUriSecrets", () => {
  it("creates the revision's Secret once, owned by the revision, even before the cache sees it", async () => {
    const { m, plan, revision, name } = setup("a");
    const { ctx, created } = fakeContext([]);
    await ensureUriSecrets(ctx, m, [plan, plan], [revision]);
    await ensureUriSecrets(ctx, m, [plan], [revision]);
    assert.equal(created.length, 1, "one create: the second reconcile waits for the cache");
    assert.equal(created[0]?.metadata.name, name);
    assert.deepEqual(created[0]?.metadata.ownerReferences, [
      {
        apiVersion: "apps/v1",
        kind: "ControllerRevision",
        name: revision.metadata!.name,
        uid: "rev-uid",
        controller: true,
      },
    ]);
  });

  it("writes nothing for a plain URI, or when our Secret is cached", async () => {
    const plain = setup("b", "s3://bucket/m/");
    const none = fakeContext([]);
    await ensureUriSecrets(none.ctx, plain.m, [plain.plan], [plain.revision]);
    assert.equal(none.created.length, 0);
    const { m, plan, revision, name } = setup("c");
    const ours = {
      metadata: { name, namespace: "c", ownerReferences: [{ uid: "rev-uid", controller: true }] },
    };
    const cached = fakeContext([ours as KubeObject]);
    await ensureUriSecrets(cached.ctx, m, [plan], [revision]);
    assert.equal(cached.created.length, 0);
  });

  it("refuses a same-named Secret it did not make: the Job would download what it says", async () => {
    const { m, plan, revision, name } = setup("d");
    const foreign = { metadata: { name, namespace: "d" } } as KubeObject;
    await assert.rejects(
      ensureUriSecrets(fakeContext([foreign]).ctx, m, [plan], [revision]),
      new RegExp(`Secret ${name} exists but the operator did not create it`),
    );
  });

  it("takes AlreadyExists as done (created by an earlier reconcile), and fails on anything else", async () => {
    const { m, plan, revision } = setup("e");
    await ensureUriSecrets(fakeContext([], new ApiError(409, "exists")).ctx, m, [plan], [revision]);
    const other = setup("f");
    await assert.rejects(
      ensureUriSecrets(
        fakeContext([], new ApiError(403, "forbidden")).ctx,
        other.m,
        [other.plan],
        [other.revision],
      ),
      /forbidden/,
    );
  });
});

describe("missingUriSecret", () => {
  it("a revision served again from its recorded URI needs its Secret", () => {
    const m = model({ model: { uri: "https://b/m.tgz?X-Amz-Signature=REDACTED", format: "tensorflow" } });
    const plan = planModel(m, tf, { content: "0123456789", uriSecret: "resnet-abc-uri" });
    const missing = missingUriSecret(store([]), plan);
    assert.equal(missing?.reason, "SecretNotFound");
    assert.match(missing?.message ?? "", /Secret resnet-abc-uri, which holds the exact model URI/);
    const present = { metadata: { name: "resnet-abc-uri", namespace: "ml" } } as KubeObject;
    assert.equal(missingUriSecret(store([present]), plan), undefined);
    assert.equal(
      missingUriSecret(store([]), planModel(model({ model: { uri: signed, format: "tensorflow" } }), tf)),
      undefined,
      "the spec's own is created, not awaited",
    );
  });
});
