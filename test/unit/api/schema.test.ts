import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { allCrds, mlModelCrd } from "../../../src/api/crds.ts";
import { applySchemaDefaults } from "../../../src/api/defaults.ts";
import { type MLModelSpec, type MLModelStatus, mlModelSpecSchema } from "../../../src/api/mlmodel.ts";
import type { SchemaNode } from "../../../src/api/schema-types.ts";
import type { ServingRuntimeSpec } from "../../../src/api/servingruntime.ts";

/** Paths of properties without a description, so `kubectl explain` never shows a blank. */
function undescribed(node: SchemaNode, path: string): string[] {
  const out: string[] = [];
  for (const [name, child] of Object.entries(node.properties ?? {})) {
    const p = `${path}.${name}`;
    if (!child.description && !["apiVersion", "kind", "metadata"].includes(name)) out.push(p);
    out.push(...undescribed(child, p));
  }
  if (node.items) out.push(...undescribed(node.items, `${path}[]`));
  return out;
}

describe("CRD schemas", () => {
  it("describe every field of every kind", () => {
    for (const crd of allCrds) {
      const version = (crd.spec.versions as { schema: { openAPIV3Schema: SchemaNode } }[])[0]!;
      assert.deepEqual(
        undescribed(version.schema.openAPIV3Schema, crd.spec.names ? crd.metadata.name : ""),
        [],
      );
    }
  });

  it("give MLModel a short name, status and scale subresources and printer columns", () => {
    const spec = mlModelCrd.spec as {
      names: { shortNames: string[] };
      versions: { subresources: Record<string, unknown>; additionalPrinterColumns: { name: string }[] }[];
    };
    assert.deepEqual(spec.names.shortNames, ["mlm"]);
    const v = spec.versions[0]!;
    assert.deepEqual(Object.keys(v.subresources).sort(), ["scale", "status"]);
    assert.deepEqual(
      v.additionalPrinterColumns.map((c) => c.name),
      ["Phase", "Ready", "Replicas", "Download", "URL", "Version", "Canary", "Runtime", "Reason", "Age"],
    );
  });

  it("validate cross-field rules with messages a person understands", () => {
    const rules = (mlModelSpecSchema["x-kubernetes-validations"] as readonly { message: string }[]).map(
      (r) => r.message,
    );
    assert.ok(rules.includes("set either replicas or autoscaling, not both"));
    for (const message of rules) assert.match(message, /^[a-z].{20,}/, `terse message: ${message}`);
  });
});

describe("applySchemaDefaults", () => {
  it("fills nested defaults as the API server does (observed on v1.36 for this CRD)", () => {
    const spec: MLModelSpec = { model: { uri: "s3://bucket/resnet", format: "tensorflow" } };
    const defaulted = applySchemaDefaults(mlModelSpecSchema, spec);
    assert.deepEqual(defaulted, {
      model: { uri: "s3://bucket/resnet", format: "tensorflow" },
      endpoint: { serviceType: "ClusterIP" },
      rollout: {
        autoRollback: true,
        maxSurge: 1,
        maxUnavailable: 0,
        progressDeadlineSeconds: 600,
        revisionHistoryLimit: 10,
      },
      storage: { accessMode: "ReadWriteOnce", size: "10Gi" },
    });
    // The defaulted type has the defaulted fields as required (compile-time check).
    const deadline: number = defaulted.rollout.progressDeadlineSeconds;
    assert.equal(deadline, 600);
  });

  it("keeps values the user set and leaves absent optional objects absent", () => {
    const defaulted = applySchemaDefaults(mlModelSpecSchema, {
      model: { uri: "pvc://claim/m" },
      image: "x",
      autoscaling: { maxReplicas: 4 },
      endpoint: { serviceType: "NodePort" },
    });
    assert.deepEqual(defaulted.autoscaling, {
      maxReplicas: 4,
      minReplicas: 1,
      targetCPUUtilizationPercentage: 80,
    });
    assert.equal(defaulted.endpoint.serviceType, "NodePort");
    assert.equal(defaulted.resources, undefined);
    assert.equal(defaulted.placement, undefined);
  });
});

describe("derived TypeScript types", () => {
  it("accept what the schema accepts and reject the rest (checked by tsc)", () => {
    const ok: MLModelSpec = {
      model: { uri: "gs://b/m", version: "1", credentialsSecretRef: { name: "creds" } },
      endpoint: { protocol: "Both", restPort: 8501 },
      rollout: { maxSurge: "25%" },
      resources: { cpu: "500m", memory: 1024, gpu: 1 },
      placement: { nodeSelector: { gpu: "a100" }, affinity: { nodeAffinity: {} } },
    };
    // @ts-expect-error protocol is an enum
    const badProtocol: MLModelSpec = { model: {}, endpoint: { protocol: "HTTP" } };
    // @ts-expect-error model is required
    const noModel: MLModelSpec = {};
    // @ts-expect-error a condition needs status, reason, message and lastTransitionTime
    const badCondition: MLModelStatus = { conditions: [{ type: "Ready" }] };
    // @ts-expect-error protocols are REST or gRPC
    const badRuntime: ServingRuntimeSpec = { image: "x", supportedModelFormats: [], protocols: ["HTTP"] };
    assert.equal(ok.endpoint?.protocol, "Both");
    assert.ok(badProtocol && noModel && badCondition && badRuntime);
  });
});
