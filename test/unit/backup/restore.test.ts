/**
 * `mlmodel restore`'s checks and writes against an in-memory client, with an "operator" that
 * records the spec's revision the moment the model is created (numbered 1, as a real operator
 * that has seen no history does) and, once, renumbers it from a stale view after restore wrote
 * it: the race restore's last step settles. The real control plane: test/e2e/backup/.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { check, type Flags, restore } from "../../../src/cli/commands/restore.ts";
import { CliError } from "../../../src/cli/errors.ts";
import { type BackupContents, buildBackup, parseBackup } from "../../../src/operator/backup.ts";
import { childLabels, labels } from "../../../src/operator/names.ts";
import { revisionData } from "../../../src/operator/revisions.ts";
import { ApiError, type KubeClient, type KubeObject, type ResourceKind } from "../../../src/runtime/index.ts";

type Obj = KubeObject & Record<string, unknown>;
const clone = <T>(v: T): T => structuredClone(v);

/** Just what restore calls, over a map; every write recorded as "verb Kind/name". */
class MemoryClient {
  readonly objects = new Map<string, Obj>();
  readonly writes: string[] = [];
  #uid = 0;
  #version = 0;
  /** Called after each write: the operator's part. */
  onWrite: (verb: string, obj: Obj) => void = () => {};

  #key(kind: ResourceKind, ns: string | undefined, name: string) {
    return `${kind.kind}/${kind.namespaced ? ns : ""}/${name}`;
  }
  #store(kind: ResourceKind, obj: Obj, verb: string): Obj {
    const stored = clone(obj);
    stored.metadata.resourceVersion = String(++this.#version);
    this.objects.set(this.#key(kind, obj.metadata.namespace, obj.metadata.name!), stored);
    this.writes.push(`${verb} ${kind.kind}/${obj.metadata.name}`);
    this.onWrite(verb, stored);
    return clone(stored);
  }
  put(kind: ResourceKind, obj: Obj): Obj {
    const stored = { ...clone(obj), metadata: { ...obj.metadata, uid: `uid-${++this.#uid}` } };
    this.objects.set(this.#key(kind, obj.metadata.namespace, obj.metadata.name!), stored);
    return stored;
  }
  async get(kind: ResourceKind, key: { namespace?: string; name: string }) {
    const found = this.objects.get(this.#key(kind, key.namespace, key.name));
    return found ? clone(found) : undefined;
  }
  async list(kind: ResourceKind, opts: { namespace?: string; labelSelector?: string } = {}) {
    const wanted = (opts.labelSelector ?? "")
      .split(",")
      .filter(Boolean)
      .map((p) => p.split("="));
    const items = [...this.objects.entries()]
      .filter(([k]) => k.startsWith(`${kind.kind}/${opts.namespace ?? ""}`))
      .map(([, o]) => clone(o))
      .filter((o) => wanted.every(([l, v]) => o.metadata.labels?.[l!] === v));
    return { items, resourceVersion: String(this.#version) };
  }
  async create(kind: ResourceKind, obj: Obj) {
    if (await this.get(kind, { namespace: obj.metadata.namespace, name: obj.metadata.name! }))
      throw new ApiError(409, "AlreadyExists");
    return this.#store(kind, { ...obj, metadata: { ...obj.metadata, uid: `uid-${++this.#uid}` } }, "create");
  }
  async replace(kind: ResourceKind, obj: Obj) {
    const had = (await this.get(kind, { namespace: obj.metadata.namespace, name: obj.metadata.name! }))!;
    return this.#store(kind, { ...obj, metadata: { ...obj.metadata, uid: had.metadata.uid } }, "replace");
  }
  async apply(kind: ResourceKind, obj: Obj) {
    const had = await this.get(kind, { namespace: obj.metadata.namespace, name: obj.metadata.name! });
    if (had?.data !== undefined && JSON.stringify(had.data) !== JSON.stringify(obj.data))
      throw new ApiError(422, "data: field is immutable");
    const uid = had?.metadata.uid ?? `uid-${++this.#uid}`;
    return this.#store(
      kind,
      { ...had, ...obj, metadata: { ...had?.metadata, ...obj.metadata, uid } } as Obj,
      "apply",
    );
  }
  async patch(kind: ResourceKind, key: { namespace?: string; name: string }, patch: Record<string, unknown>) {
    const had = (await this.get(kind, key))!;
    const merged = { ...had, ...patch, metadata: { ...had.metadata, ...(patch.metadata as object) } } as Obj;
    return this.#store(kind, merged, "patch");
  }
  async delete(kind: ResourceKind, key: { namespace?: string; name: string }) {
    this.writes.push(`delete ${kind.kind}/${key.name}`);
    return this.objects.delete(this.#key(kind, key.namespace, key.name));
  }
}

const ns = "models";
const revisionKind: ResourceKind = {
  group: "apps",
  version: "v1",
  kind: "ControllerRevision",
  plural: "controllerrevisions",
  namespaced: true,
};
const secretKind: ResourceKind = {
  group: "",
  version: "v1",
  kind: "Secret",
  plural: "secrets",
  namespaced: true,
};
const signed = "https://b.example.com/m/v1.tgz?sig=abcdefgh12345";
const namespaceKind: ResourceKind = {
  group: "",
  version: "v1",
  kind: "Namespace",
  plural: "namespaces",
  namespaced: false,
};
const mlModelKind: ResourceKind = {
  group: "serving.mlmodel.dev",
  version: "v1alpha1",
  kind: "MLModel",
  plural: "mlmodels",
  namespaced: true,
};
const namespace = (c: MemoryClient) =>
  c.put(namespaceKind, { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });

/** A backup of one model with three revisions, the first with credentials in its URI; and one model whose own URI has them. */
function backupContents(): BackupContents {
  const model = (name: string, uri: string): MLModel => ({
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: { name, namespace: ns, uid: `old-${name}` },
    spec: { model: { uri } },
    status: {
      phase: "Ready",
      revision: { current: `${name.slice(0, 1)}000000003`, lastReady: `${name.slice(0, 1)}000000003` },
    },
  });
  const rev = (m: MLModel, hash: string, number: number, uri: string): V1ControllerRevision => ({
    apiVersion: "apps/v1",
    kind: "ControllerRevision",
    metadata: {
      name: `${m.metadata.name}-${hash}`,
      namespace: ns,
      labels: { ...childLabels(m.metadata.name!, "revision"), [labels.revision]: hash },
      ownerReferences: [
        {
          apiVersion: m.apiVersion,
          kind: "MLModel",
          name: m.metadata.name!,
          uid: m.metadata.uid!,
          controller: true,
        },
      ],
    },
    data: revisionData({ model: { uri } }, m.metadata.name!, hash),
    revision: number,
  });
  const resnet = model("resnet", "https://m.example.com/v3.tgz");
  const bert = model("bert", signed);
  const backup = buildBackup(
    {
      namespaces: [{ apiVersion: "v1", kind: "Namespace", metadata: { name: ns } }],
      clusterRuntimes: [],
      runtimes: [],
      models: [resnet, bert],
      revisions: [
        rev(resnet, "r000000001", 1, signed),
        rev(resnet, "r000000002", 2, "https://m.example.com/v2.tgz"),
        rev(resnet, "r000000003", 3, "https://m.example.com/v3.tgz"),
        rev(bert, "b000000003", 1, signed),
      ],
    },
    "t",
    "test",
  );
  return parseBackup(backup.text, "f.yaml");
}

const flags = (over: Partial<Flags> = {}): Flags => ({
  overwrite: false,
  allowMissing: false,
  dryRun: false,
  concurrency: 4,
  ...over,
});

function uriSecret(client: MemoryClient, name: string, uri: string) {
  client.put(secretKind, {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name, namespace: ns },
    data: { uri: Buffer.from(uri).toString("base64") },
  });
}

/** The operator: records the spec's revision at 1 when a model appears; renumbers it once from a stale view. */
function racingOperator(client: MemoryClient) {
  let staleWrites = 0;
  client.onWrite = (verb, obj) => {
    if (obj.kind === "MLModel" && verb === "create" && obj.metadata.name === "resnet") {
      client.put(revisionKind, {
        apiVersion: "apps/v1",
        kind: "ControllerRevision",
        metadata: {
          name: "resnet-r000000003",
          namespace: ns,
          labels: { ...childLabels("resnet", "revision"), [labels.revision]: "r000000003" },
          ownerReferences: [
            {
              apiVersion: "serving.mlmodel.dev/v1alpha1",
              kind: "MLModel",
              name: "resnet",
              uid: obj.metadata.uid!,
              controller: true,
            },
          ],
        },
        data: revisionData({ model: { uri: "https://m.example.com/v3.tgz" } }, "resnet", "r000000003"),
        revision: 1,
      });
    }
    if (
      obj.kind === "ControllerRevision" &&
      obj.metadata.name === "resnet-r000000001" &&
      staleWrites++ === 0
    ) {
      // Its view had the spec's revision at 1 and revision 2 restored: the next number is 3... from a view
      // where revision 1 was still its own: it writes 2.
      const spec = client.objects.get(`ControllerRevision/${ns}/resnet-r000000003`)!;
      client.objects.set(`ControllerRevision/${ns}/resnet-r000000003`, { ...spec, revision: 2 });
    }
  };
}

const revisionNumbers = (client: MemoryClient, model: string) =>
  [...client.objects.values()]
    .filter((o) => o.kind === "ControllerRevision" && o.metadata.labels?.[labels.model] === model)
    .map((o) => `${o.metadata.labels?.[labels.revision]}:${o.revision}`)
    .sort();

describe("restore against an in-memory cluster", () => {
  it("restores the history under its numbers despite the operator, owned by the new uids", async () => {
    const client = new MemoryClient();
    namespace(client); // the user made it, for the Secrets
    uriSecret(client, "resnet-r000000001-uri", signed);
    uriSecret(client, "bert-b000000003-uri", signed);
    racingOperator(client);
    const contents = backupContents();
    const kube = client as unknown as KubeClient;
    const checked = await check(kube, contents, flags());
    const restored = await restore(kube, contents, checked, flags());
    assert.deepEqual(revisionNumbers(client, "resnet"), ["r000000001:1", "r000000002:2", "r000000003:3"]);
    assert.equal(restored.renumbered, 1, "the stale renumbering was set back");
    assert.deepEqual(restored.warnings, []);
    const model = client.objects.get(`MLModel/${ns}/resnet`)!;
    for (const o of client.objects.values()) {
      if (o.kind === "ControllerRevision" && o.metadata.labels?.[labels.model] === "resnet")
        assert.equal(o.metadata.ownerReferences?.[0]?.uid, model.metadata.uid);
    }
    const secret = client.objects.get(`Secret/${ns}/resnet-r000000001-uri`)!;
    const rev1 = client.objects.get(`ControllerRevision/${ns}/resnet-r000000001`)!;
    assert.deepEqual(
      secret.metadata.ownerReferences?.map((o) => [o.kind, o.uid]),
      [["ControllerRevision", rev1.metadata.uid]],
    );
    assert.equal(
      (client.objects.get(`MLModel/${ns}/bert`) as MLModel).spec.model.uri,
      signed,
      "the exact URI, from its Secret",
    );
    assert.deepEqual(
      (model as MLModel).status,
      { revision: { lastReady: "r000000003" } },
      "the status memory",
    );
  });

  const refusals: [string, (c: MemoryClient) => void, Partial<Flags>, RegExp][] = [
    [
      "a model of the same name",
      (c) => {
        namespace(c);
        uriSecret(c, "bert-b000000003-uri", signed);
        c.put(mlModelKind, {
          apiVersion: "serving.mlmodel.dev/v1alpha1",
          kind: "MLModel",
          metadata: { name: "resnet", namespace: ns },
        });
      },
      {},
      /the cluster already has 1 MLModel\(s\) named as in the backup \(models\/resnet\): nothing was written/,
    ],
    [
      "a Secret a model serves with, missing",
      () => {},
      {},
      /1 object\(s\) the restored models need do not exist \(a backup holds no Secret\): nothing was written; create them first, or pass --allow-missing:\n {2}Secret models\/bert-b000000003-uri \(the exact spec.model.uri of MLModel bert\)/,
    ],
  ];
  for (const [name, setUp, over, message] of refusals) {
    it(`refuses ${name}, writing nothing`, async () => {
      const client = new MemoryClient();
      setUp(client);
      await assert.rejects(
        check(client as unknown as KubeClient, backupContents(), flags(over)),
        (err: Error) => {
          assert.ok(err instanceof CliError);
          assert.match(err.message, message);
          return true;
        },
      );
      assert.deepEqual(client.writes, []);
    });
  }

  it("with --allow-missing, leaves out a model whose exact URI's Secret is missing, saying so", async () => {
    const client = new MemoryClient();
    const contents = backupContents();
    const kube = client as unknown as KubeClient;
    const checked = await check(kube, contents, flags({ allowMissing: true }));
    assert.ok(
      checked.warnings.some((w) =>
        /resnet-r000000001-uri .* does not exist: `mlmodel rollback resnet --to-revision` to it will fail/.test(
          w,
        ),
      ),
    );
    const restored = await restore(kube, contents, checked, flags({ allowMissing: true }));
    assert.equal(restored.models, 1);
    assert.equal(client.objects.has(`MLModel/${ns}/bert`), false);
    assert.match(
      restored.warnings[0]!,
      /MLModel models\/bert not restored: its exact model URI is in Secret bert-b000000003-uri, which does not exist/,
    );
  });
});
