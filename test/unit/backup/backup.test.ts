import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import {
  BackupError,
  backupAnnotations,
  backupHeader,
  buildBackup,
  type ClusterObjects,
  modelToRestore,
  parseBackup,
  portable,
  revisionsNotInBackup,
  revisionsToRenumber,
  revisionToRestore,
  sameContent,
  statusMemory,
} from "../../../src/operator/backup.ts";
import { childLabels, labels } from "../../../src/operator/names.ts";
import { revisionData } from "../../../src/operator/revisions.ts";
import type { KubeObject } from "../../../src/runtime/index.ts";

const ns = "models";
const signed = "https://b.s3.amazonaws.com/m/v1.tgz?X-Amz-Signature=s3cr3tsignature";

function model(name: string, spec: MLModelSpec, uid = `uid-${name}`, extra: Partial<MLModel> = {}): MLModel {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: {
      name,
      namespace: ns,
      uid,
      resourceVersion: "42",
      generation: 3,
      creationTimestamp: "2026-11-27T00:00:00Z",
      managedFields: [{ manager: "kubectl" }],
      annotations: {
        "kubectl.kubernetes.io/last-applied-configuration": JSON.stringify({ spec }),
        team: "search",
      },
      labels: { app: name },
    } as MLModel["metadata"],
    spec,
    ...extra,
  };
}

/** A revision as the operator records it: owned by the model's uid, data from revisionData. */
function revision(
  m: MLModel,
  hash: string,
  number: number,
  spec: MLModelSpec = m.spec,
): V1ControllerRevision {
  return {
    apiVersion: "apps/v1",
    kind: "ControllerRevision",
    metadata: {
      name: `${m.metadata.name}-${hash}`,
      namespace: ns,
      uid: `uid-rev-${hash}`,
      resourceVersion: "7",
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
    data: revisionData(spec, m.metadata.name!, hash),
    revision: number,
  };
}

const plain = model(
  "resnet",
  {
    model: { uri: "https://models.example.com/m/v3.tgz", credentialsSecretRef: { name: "s3-creds" } },
    replicas: 2,
  },
  "uid-resnet",
  {
    status: {
      phase: "Ready",
      observedGeneration: 3,
      revision: {
        current: "c000000003",
        lastReady: "c000000003",
        currentNumber: 3,
        history: [{ revision: "c000000003", readyAt: "2026-11-27T01:00:00Z" }],
      },
    },
  },
);
const plainRevisions = [
  revision(plain, "a000000001", 1, { model: { uri: signed } }),
  revision(plain, "b000000002", 2, { model: { uri: "pvc://old-claim/m" } }),
  revision(plain, "c000000003", 3),
];
const secretive = model("bert", { model: { uri: signed } });
const secretiveRevisions = [revision(secretive, "d000000001", 1)];

function objects(overrides: Partial<ClusterObjects> = {}): ClusterObjects {
  return {
    namespaces: [
      {
        apiVersion: "v1",
        kind: "Namespace",
        metadata: {
          name: ns,
          uid: "uid-ns",
          labels: { "kubernetes.io/metadata.name": ns, "pod-security.kubernetes.io/enforce": "restricted" },
        },
        spec: { finalizers: ["kubernetes"] },
        status: { phase: "Active" },
      } as KubeObject,
    ],
    clusterRuntimes: [
      {
        apiVersion: "serving.mlmodel.dev/v1alpha1",
        kind: "ClusterServingRuntime",
        metadata: { name: "tfserving", uid: "uid-crt", resourceVersion: "1" },
        spec: { image: "tensorflow/serving:2.17.0" },
      } as KubeObject,
    ],
    runtimes: [],
    models: [plain, secretive],
    revisions: [
      ...plainRevisions,
      ...secretiveRevisions,
      // Same label, another owner: not resnet's history.
      {
        ...revision(plain, "e000000009", 9),
        metadata: { ...revision(plain, "e000000009", 9).metadata, ownerReferences: [] },
      },
    ],
    ...overrides,
  };
}

const backup = () => buildBackup(objects(), "2026-11-27T02:00:00Z", `namespace ${ns}`);

describe("portable: what another cluster can take", () => {
  const cases: [string, (o: KubeObject) => unknown][] = [
    ["uid", (o) => o.metadata.uid],
    ["resourceVersion", (o) => o.metadata.resourceVersion],
    ["generation", (o) => (o.metadata as { generation?: number }).generation],
    ["creationTimestamp", (o) => o.metadata.creationTimestamp],
    ["managedFields", (o) => (o.metadata as { managedFields?: unknown }).managedFields],
    ["ownerReferences", (o) => o.metadata.ownerReferences],
    ["status", (o) => (o as { status?: unknown }).status],
    [
      "kubectl's last-applied copy",
      (o) => o.metadata.annotations?.["kubectl.kubernetes.io/last-applied-configuration"],
    ],
  ];
  const stripped = portable({ ...plainRevisions[0]!, status: { x: 1 } } as unknown as KubeObject);
  const strippedModel = portable(plain as KubeObject);
  for (const [field, read] of cases) {
    it(`drops ${field}`, () => {
      assert.equal(read(stripped), undefined);
      assert.equal(read(strippedModel), undefined);
    });
  }
  it("keeps name, namespace, labels, the user's annotations and the spec", () => {
    assert.equal(strippedModel.metadata.name, "resnet");
    assert.equal(strippedModel.metadata.namespace, ns);
    assert.deepEqual(strippedModel.metadata.labels, { app: "resnet" });
    assert.deepEqual(strippedModel.metadata.annotations, { team: "search" });
    assert.deepEqual((strippedModel as MLModel).spec, plain.spec);
  });
});

describe("statusMemory: the status the operator cannot recompute", () => {
  const cases: [string, MLModel["status"], unknown][] = [
    ["no status", undefined, undefined],
    ["no revision block", { phase: "Pending" }, undefined],
    [
      "a ready model: last ready and history, not phase, numbers or current",
      plain.status,
      {
        revision: {
          lastReady: "c000000003",
          history: [{ revision: "c000000003", readyAt: "2026-11-27T01:00:00Z" }],
        },
      },
    ],
    [
      "a rolled-back model: the failure it rolled back from",
      {
        phase: "Ready",
        revision: {
          current: "b",
          lastReady: "a",
          failed: {
            revision: "b",
            number: 2,
            reason: "CrashLoopBackOff",
            message: "m",
            at: "2026-11-27T00:00:00Z",
          },
        },
      },
      {
        revision: {
          lastReady: "a",
          failed: {
            revision: "b",
            number: 2,
            reason: "CrashLoopBackOff",
            message: "m",
            at: "2026-11-27T00:00:00Z",
          },
        },
      },
    ],
  ];
  for (const [name, status, want] of cases) it(name, () => assert.deepEqual(statusMemory(status), want));
});

describe("buildBackup", () => {
  it("starts with the header and lists what must exist first, by name", () => {
    const { text, requirements } = backup();
    assert.ok(text.startsWith(`${backupHeader}\n`));
    assert.deepEqual(
      requirements.map((r) => [r.kind, r.name, r.model, r.rollbackOnly]),
      [
        ["Secret", "bert-d000000001-uri", "bert", false],
        ["Secret", "resnet-a000000001-uri", "resnet", true],
        ["Secret", "s3-creds", "resnet", false],
        ["PersistentVolumeClaim", "old-claim", "resnet", true],
      ].sort((a, b) => `${a[0]}/${a[1]}`.localeCompare(`${b[0]}/${b[1]}`)),
    );
    assert.match(text, /# {3}Secret models\/bert-d000000001-uri: the exact spec.model.uri of MLModel bert\n/);
    assert.match(
      text,
      /resnet-a000000001-uri: revision 1's exact model URI of MLModel resnet \(only to roll back to it\)/,
    );
  });

  it("never holds a credential: a URI with one is redacted and names its Secret", () => {
    const { text, contents } = backup();
    assert.doesNotMatch(text, /s3cr3tsignature/);
    const bert = contents.models.find((m) => m.model.metadata.name === "bert")!.model;
    assert.equal(bert.spec.model.uri, "https://b.s3.amazonaws.com/m/v1.tgz?X-Amz-Signature=REDACTED");
    assert.equal(bert.metadata.annotations?.[backupAnnotations.uriSecret], "bert-d000000001-uri");
  });

  it("holds each model's own revisions, newest first, without owners or server-set fields", () => {
    const resnet = backup().contents.models.find((m) => m.model.metadata.name === "resnet")!;
    assert.deepEqual(
      resnet.revisions.map((r) => r.revision),
      [3, 2, 1],
    );
    for (const r of resnet.revisions) {
      assert.equal(r.metadata?.ownerReferences, undefined);
      assert.equal(r.metadata?.uid, undefined);
      assert.equal(r.metadata?.resourceVersion, undefined);
      assert.equal(r.apiVersion, "apps/v1");
    }
  });

  it("keeps only the status memory of a model, and the namespace's own labels", () => {
    const { contents } = backup();
    const resnet = contents.models.find((m) => m.model.metadata.name === "resnet")!.model;
    assert.deepEqual(resnet.status, statusMemory(plain.status));
    assert.deepEqual(contents.namespaces[0], {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns, labels: { "pod-security.kubernetes.io/enforce": "restricted" } },
    });
  });

  it("refuses a model whose credentials no Secret keeps yet, naming it", () => {
    const unrecorded = objects({ revisions: plainRevisions });
    assert.throws(
      () => buildBackup(unrecorded, "t", "x"),
      (err: Error) =>
        err instanceof BackupError &&
        /MLModel models\/bert: spec.model.uri has credentials in it and no revision keeps it/.test(
          err.message,
        ),
    );
  });

  it("redacts anything else that looks like a credential, and says where", () => {
    const leaky = model("leaky", {
      model: { uri: "https://models.example.com/m.tgz" },
      env: [{ name: "HOOK", value: "https://hooks.example.com/x?token=abcdefgh12345" }],
    });
    const { text, warnings } = buildBackup(objects({ models: [leaky], revisions: [] }), "t", "x");
    assert.doesNotMatch(text, /abcdefgh12345/);
    assert.deepEqual(warnings, [
      "MLModel models/leaky: spec.env[0].value looked like a credential and is written redacted",
    ]);
  });
});

describe("parseBackup", () => {
  it("reads back what buildBackup wrote", () => {
    const { text, contents } = backup();
    assert.deepEqual(parseBackup(text, "f.yaml"), contents);
  });

  const good = backup().text;
  const [header, ...docs] = good.split("\n---\n");
  const resnetDoc = docs.findIndex((d) => /kind: MLModel\n/.test(d) && /name: resnet\n/.test(d));
  const revDoc = docs.findIndex((d) => /kind: ControllerRevision/.test(d) && /revision: 2\n/.test(d));
  const replaced = (index: number, from: RegExp | string, to: string) =>
    [header, ...docs.map((d, i) => (i === index ? d.replace(from, to) : d))].join("\n---\n");
  const cases: [string, string, RegExp][] = [
    [
      "a file that is not a backup",
      "apiVersion: v1\nkind: ConfigMap\n",
      /f.yaml is not an mlmodel backup: its first line is "apiVersion: v1", a backup's is "# mlmodel backup, format 1"/,
    ],
    ["an empty file", "", /f.yaml is not an mlmodel backup/],
    ["YAML that does not parse", `${backupHeader}\n---\nkind: [\n`, /f.yaml, document 1: not valid YAML/],
    [
      "a list where an object belongs",
      `${backupHeader}\n---\n- a\n`,
      /document 1: expected an object, got a list/,
    ],
    [
      "a kind a backup never holds",
      `${backupHeader}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: n}\n`,
      /document 1: kind "Secret" is not one a backup holds \(Namespace, ClusterServingRuntime, ServingRuntime, MLModel, ControllerRevision\)/,
    ],
    [
      "a wrong apiVersion",
      replaced(resnetDoc, "serving.mlmodel.dev/v1alpha1", "serving.mlmodel.dev/v9"),
      /apiVersion "serving.mlmodel.dev\/v9" of a MLModel must be "serving.mlmodel.dev\/v1alpha1"/,
    ],
    [
      "a namespaced object without its namespace",
      replaced(resnetDoc, /\n {2}namespace: models/, ""),
      /MLModel resnet has no metadata.namespace/,
    ],
    [
      "an object read from a cluster",
      replaced(resnetDoc, "metadata:\n", "metadata:\n  uid: abc\n"),
      /has metadata.uid, resourceVersion or ownerReferences: it was read from a cluster/,
    ],
    [
      "a revision of no model in the file",
      replaced(revDoc, "serving.mlmodel.dev/model: resnet", "serving.mlmodel.dev/model: gone"),
      /ControllerRevision resnet-b000000002 has label serving.mlmodel.dev\/model="gone", which names no MLModel of namespace models in the file/,
    ],
    [
      "two revisions with one number",
      replaced(revDoc, "revision: 2\n", "revision: 3\n"),
      /has revision 3, as resnet-c000000003 does/,
    ],
    [
      "a revision number that is not one",
      replaced(revDoc, "revision: 2\n", "revision: two\n"),
      /has revision "two", expected a positive integer/,
    ],
    ["an object twice", `${good}---\n${docs[resnetDoc]}`, /MLModel models\/resnet appears twice/],
  ];
  for (const [name, text, error] of cases) {
    it(`refuses ${name}, naming the document and field`, () => {
      assert.throws(
        () => parseBackup(text, "f.yaml"),
        (err: Error) => err instanceof BackupError && error.test(err.message),
      );
    });
  }
});

describe("restoring", () => {
  const { contents } = backup();
  const bert = contents.models.find((m) => m.model.metadata.name === "bert")!;
  const resnet = contents.models.find((m) => m.model.metadata.name === "resnet")!;

  it("a model gets its exact URI back from the Secret, without the backup's annotation or status", () => {
    const restored = modelToRestore(bert.model, signed);
    assert.equal(restored.spec.model.uri, signed);
    assert.deepEqual(restored.metadata.annotations, { team: "search" });
    assert.equal(restored.status, undefined);
    assert.deepEqual(modelToRestore(resnet.model, undefined).spec, plain.spec);
    assert.deepEqual(modelToRestore(resnet.model, undefined).metadata.annotations, { team: "search" });
  });

  it("a revision is owned by the restored model", () => {
    const owner = {
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      name: "resnet",
      uid: "new",
      controller: true,
    };
    assert.deepEqual(revisionToRestore(resnet.revisions[0]!, owner).metadata?.ownerReferences, [owner]);
  });

  const live = (hash: string, number: number) => ({
    ...resnet.revisions[0]!,
    metadata: { labels: { [labels.revision]: hash } },
    revision: number,
  });
  const renumberCases: [string, V1ControllerRevision[], number[]][] = [
    ["nothing live yet: all", [], [3, 2, 1]],
    ["as backed up: none", [live("c000000003", 3), live("b000000002", 2), live("a000000001", 1)], []],
    ["the operator numbered the spec's revision 1 first", [live("c000000003", 1)], [3, 2, 1]],
    [
      "the operator renumbered the spec's revision past the backup's",
      [live("b000000002", 2), live("a000000001", 1), live("c000000003", 4)],
      [3],
    ],
  ];
  for (const [name, have, want] of renumberCases) {
    it(`revisions to write again: ${name}`, () => {
      assert.deepEqual(
        revisionsToRenumber(resnet, have).map((r) => r.revision),
        want,
      );
    });
  }

  it("names live revisions the backup does not have", () => {
    assert.deepEqual(
      revisionsNotInBackup(resnet, [live("c000000003", 3), live("f000000004", 4)]).map((r) => r.revision),
      [4],
    );
  });

  it("sameContent compares spec and labels, not server-set fields", () => {
    const runtime = contents.clusterRuntimes[0]!;
    const fromCluster = {
      ...runtime,
      metadata: { ...runtime.metadata, uid: "x", resourceVersion: "9" },
      status: {},
    };
    assert.equal(sameContent(fromCluster, runtime), true);
    assert.equal(sameContent({ ...fromCluster, spec: { image: "other" } } as KubeObject, runtime), false);
    assert.equal(
      sameContent({ ...fromCluster, metadata: { ...fromCluster.metadata, labels: { a: "b" } } }, runtime),
      false,
    );
  });
});
