import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { allCrds, mlModelCrd } from "../../../src/api/crds.ts";
import { applySchemaDefaults } from "../../../src/api/defaults.ts";
import {
  type MLModelSpec,
  type MLModelStatus,
  mlModelSpecSchema,
  uriUserinfoPattern,
} from "../../../src/api/mlmodel.ts";
import type { SchemaNode } from "../../../src/api/schema-types.ts";
import type { ServingRuntimeSpec } from "../../../src/api/servingruntime.ts";
import { userinfoPattern } from "../../../src/downloader/redact.ts";

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
      [
        "Phase",
        "Ready",
        "Replicas",
        "Download",
        "URL",
        "Version",
        "Canary",
        "Cache",
        "Runtime",
        "Reason",
        "Age",
      ],
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

describe("spec.model.uri admission", () => {
  const rules = (mlModelSpecSchema.properties.model.properties.uri["x-kubernetes-validations"] ??
    []) as readonly { rule: string; message?: string; messageExpression?: string; reason?: string }[];
  const userinfoRule = rules.find((r) => r.rule.includes(uriUserinfoPattern));

  it("refuses a user name or password before the host, with the same pattern as the downloader", () => {
    assert.ok(userinfoRule, "a rule refuses userinfo");
    assert.equal(userinfoRule.rule, `!self.matches('${uriUserinfoPattern}')`);
    // CEL's matches() is RE2; this pattern means the same in JavaScript.
    assert.equal(new RegExp(uriUserinfoPattern).source, userinfoPattern.source);
    const refused = (uri: string) => new RegExp(uriUserinfoPattern).test(uri);
    for (const uri of ["https://user:pass@host/m.tgz", "hf://hf_token@org/repo", "s3://key:secret@bucket/m"])
      assert.ok(refused(uri), uri);
    for (const uri of ["hf://org/repo@main", "https://host/m.tgz?X-Amz-Signature=abc", "https://h/a@b"])
      assert.ok(!refused(uri), uri);
  });

  it("says what to do instead, never echoing the password", () => {
    for (const text of [userinfoRule?.message, userinfoRule?.messageExpression]) {
      assert.match(text ?? "", /spec\.model\.credentialsSecretRef/);
      assert.match(text ?? "", /user name or password/);
    }
    // The host is shown after a marker; userinfo never reaches the message.
    assert.match(userinfoRule?.messageExpression ?? "", /REDACTED@/);
  });

  it("no URI rule lets the API server quote the value, and none echoes it whole", () => {
    // FieldValueInvalid errors print `Invalid value: "<the whole URI>"`; Forbidden ones do not.
    for (const r of rules) assert.equal(r.reason, "FieldValueForbidden", r.rule);
    for (const r of rules) {
      const echoes = (r.messageExpression ?? "").match(/\bself\b(?!\.)/g) ?? [];
      assert.deepEqual(echoes, [], `${r.messageExpression} concatenates self as it is`);
    }
  });
});

describe("applySchemaDefaults", () => {
  it("fills nested defaults as the API server does (observed on v1.36 for this CRD)", () => {
    const spec: MLModelSpec = { model: { uri: "s3://bucket/resnet", format: "tensorflow" } };
    const defaulted = applySchemaDefaults(mlModelSpecSchema, spec);
    assert.deepEqual(defaulted, {
      model: { uri: "s3://bucket/resnet", format: "tensorflow", downloadDeadlineSeconds: 21600 },
      endpoint: { serviceType: "ClusterIP" },
      rollout: {
        autoRollback: true,
        maxSurge: 1,
        maxUnavailable: 0,
        progressDeadlineSeconds: 600,
        revisionHistoryLimit: 10,
      },
      storage: { accessMode: "ReadWriteOnce", mode: "Auto", size: "10Gi" },
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
