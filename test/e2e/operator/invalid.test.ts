/**
 * Invalid MLModels are rejected by the API server itself (schema + CEL rules of the installed
 * CRD), each with a message that names the field and says what would be right.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { stringify } from "yaml";
import { mlModelKind } from "../../../src/api/kinds.ts";
import { install } from "../../../src/install/install.ts";
import { ApiError, type KubeClient } from "../../../src/runtime/index.ts";
import { createNamespace, type TestNamespace } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { kubectl } from "../install/support.ts";
import { adminClient } from "./helpers.ts";

const valid = { model: { uri: "s3://bucket/resnet", format: "tensorflow" } };

// [what is wrong, metadata.name, spec, field the message must name, words it must contain]
const cases: [string, string, Record<string, unknown>, string, RegExp][] = [
  ["no model", "m1", {}, "spec.model", /Required/],
  [
    "unsupported URI scheme",
    "m2",
    { model: { uri: "ftp://host/m", format: "tensorflow" } },
    "spec.model.uri",
    /s3:\/\/, gs:\/\//,
  ],
  [
    "URI with spaces",
    "m3",
    { model: { uri: "s3://bucket/my model", format: "tensorflow" } },
    "spec.model.uri",
    /without spaces/,
  ],
  [
    "pvc:// with a bad claim name",
    "m4",
    { model: { uri: "pvc://Bad_Claim/m", format: "tensorflow" } },
    "spec.model.uri",
    /PersistentVolumeClaim/,
  ],
  [
    "replicas and autoscaling together",
    "m5",
    { ...valid, replicas: 2, autoscaling: { maxReplicas: 3 } },
    "spec.autoscaling",
    /either replicas or autoscaling/,
  ],
  [
    "maxReplicas below minReplicas",
    "m6",
    { ...valid, autoscaling: { minReplicas: 5, maxReplicas: 2 } },
    "spec.autoscaling.maxReplicas",
    /greater than or equal to minReplicas/,
  ],
  ["negative replicas", "m7", { ...valid, replicas: -1 }, "spec.replicas", /greater than or equal to 0/],
  [
    "bad sha256",
    "m8",
    { model: { ...valid.model, sha256: "xyz" } },
    "spec.model.sha256",
    /64 lowercase hexadecimal/,
  ],
  [
    "sha256 with a pvc:// model",
    "m9",
    { model: { uri: "pvc://claim/m", format: "tensorflow", sha256: "a".repeat(64) } },
    "spec.model.sha256",
    /needs a model.uri that is downloaded/,
  ],
  [
    "unknown protocol",
    "m10",
    { ...valid, endpoint: { protocol: "HTTP" } },
    "spec.endpoint.protocol",
    /"REST", "gRPC", "Both"/,
  ],
  [
    "unknown Service type",
    "m11",
    { ...valid, endpoint: { serviceType: "Public" } },
    "spec.endpoint.serviceType",
    /"ClusterIP", "NodePort", "LoadBalancer"/,
  ],
  [
    "same REST and gRPC port",
    "m12",
    { ...valid, endpoint: { restPort: 8500, grpcPort: 8500 } },
    "spec.endpoint.grpcPort",
    /must differ/,
  ],
  [
    "port out of range",
    "m13",
    { ...valid, endpoint: { restPort: 70000 } },
    "spec.endpoint.restPort",
    /less than or equal to 65535/,
  ],
  [
    "malformed CPU quantity",
    "m14",
    { ...valid, resources: { cpu: "1 core" } },
    "spec.resources.cpu",
    /quantity such as 500m/,
  ],
  [
    "negative GPU count",
    "m15",
    { ...valid, resources: { gpu: -1 } },
    "spec.resources.gpu",
    /greater than or equal to 0/,
  ],
  [
    "rollout that can never progress",
    "m16",
    { ...valid, rollout: { maxUnavailable: 0, maxSurge: 0 } },
    "spec.rollout.maxSurge",
    /cannot both be 0/,
  ],
  [
    "no format, runtime or image",
    "m17",
    { model: { uri: "s3://bucket/m" } },
    "spec.model.format",
    /set model.format/,
  ],
  [
    "model.path without an image",
    "m18",
    { model: { ...valid.model, path: "/m" } },
    "spec.model.path",
    /inside a custom image/,
  ],
  [
    "invalid Secret name",
    "m19",
    { model: { ...valid.model, credentialsSecretRef: { name: "My_Secret" } } },
    "spec.model.credentialsSecretRef.name",
    /lowercase DNS name/,
  ],
  [
    "invalid format word",
    "m20",
    { model: { uri: "s3://b/m", format: "TensorFlow" } },
    "spec.model.format",
    /lowercase word/,
  ],
  [
    "relative model path",
    "m21",
    { image: "x/y:1", model: { path: "models/m" } },
    "spec.model.path",
    /absolute path/,
  ],
  [
    "storage access mode",
    "m22",
    { ...valid, storage: { accessMode: "ReadOnce" } },
    "spec.storage.accessMode",
    /ReadWriteOnce/,
  ],
  [
    "duplicate env names",
    "m23",
    {
      ...valid,
      env: [
        { name: "A", value: "1" },
        { name: "A", value: "2" },
      ],
    },
    "spec.env[1]",
    /Duplicate value/,
  ],
  [
    "progress deadline too short",
    "m24",
    { ...valid, rollout: { progressDeadlineSeconds: 5 } },
    "spec.rollout.progressDeadlineSeconds",
    /greater than or equal to 30/,
  ],
  ["name too long for its Service", "m".repeat(49), valid, "", /at most 48 characters/],
];

describe("invalid MLModels are rejected by the API server", () => {
  let ns: TestNamespace;
  let admin: KubeClient;

  before(async () => {
    admin = await adminClient();
    await install(admin);
    ns = await createNamespace("e2e-invalid");
  });
  after(async () => ns?.delete());

  for (const [what, name, spec, field, words] of cases) {
    it(`${what}: names ${field || "metadata.name"}`, async () => {
      const err = await admin
        .create(mlModelKind, {
          apiVersion: "serving.mlmodel.dev/v1alpha1",
          kind: "MLModel",
          metadata: { name, namespace: ns.name },
          spec,
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(err instanceof ApiError, `expected the API server to reject it, got ${String(err)}`);
      assert.equal(err.code, 422);
      if (field)
        assert.ok(err.message.includes(`${field}:`), `message does not name ${field}: ${err.message}`);
      assert.match(err.message, words);
    });
  }

  it("a URI with a password is refused by server-side apply and kubectl, without echoing it", async () => {
    const password = `pw-${crypto.randomUUID()}`;
    const model = {
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name: "creds-in-uri", namespace: ns.name },
      spec: {
        model: { uri: `https://modeluser:${password}@models.example.com/m.tgz`, format: "tensorflow" },
      },
    };
    const check = (message: string) => {
      assert.match(message, /spec\.model\.uri: Forbidden: must not contain a user name or password/);
      assert.match(message, /got https:\/\/REDACTED@models\.example\.com\//, "the host is named");
      assert.match(message, /spec\.model\.credentialsSecretRef/, "says where credentials go");
      assert.ok(!message.includes(password) && !message.includes("modeluser"), message);
    };
    const err = await admin.apply(mlModelKind, model, { fieldManager: "e2e", force: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof ApiError, `expected a refusal, got ${String(err)}`);
    assert.equal(err.code, 422);
    check(err.message);
    const file = join(scratchDir("invalid"), "creds-in-uri.yaml");
    writeFileSync(file, stringify(model));
    const r = await kubectl(process.env.KUBECONFIG!, ["apply", "--server-side", "-f", file]);
    assert.notEqual(r.status, 0);
    check(r.stderr);
  });

  it("a pre-signed URL is accepted (its signature is kept in a Secret, shown redacted)", async () => {
    const created = await admin.create(mlModelKind, {
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name: "signed", namespace: ns.name },
      spec: { model: { uri: "https://b.s3.amazonaws.com/m.tgz?X-Amz-Signature=abc", format: "tensorflow" } },
    });
    assert.equal(created.metadata.name, "signed");
  });

  it("accepts the valid base manifest (the cases differ from it by one mistake)", async () => {
    const created = await admin.create(mlModelKind, {
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name: "valid", namespace: ns.name },
      spec: valid,
    });
    assert.equal(created.metadata.name, "valid");
  });
});
