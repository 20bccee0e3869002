import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { deployDir, renderManifestFiles } from "../../../src/install/generate.ts";
import { rbacManifests, rulesFor } from "../../../src/install/manifests.ts";
import { operatorAccess } from "../../../src/operator/access.ts";
import { uriSecretType } from "../../../src/operator/desired.ts";

describe("install manifests", () => {
  it("committed deploy/ files are current (regenerate: node src/install/generate.ts)", () => {
    for (const [file, text] of renderManifestFiles()) {
      let committed = "";
      try {
        committed = readFileSync(join(deployDir, file), "utf8");
      } catch {
        assert.fail(`deploy/${file} is missing; run node src/install/generate.ts`);
      }
      assert.equal(committed, text, `deploy/${file} is stale; run node src/install/generate.ts`);
    }
  });

  it("RBAC grants exactly the declared access, no wildcards", () => {
    const role = rbacManifests().find((o) => o.kind === "ClusterRole") as unknown as {
      rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[];
    };
    const granted = new Set(
      role.rules.flatMap((r) =>
        r.resources.flatMap((res) => r.verbs.map((v) => `${r.apiGroups[0]}/${res}:${v}`)),
      ),
    );
    const declared = new Set(
      operatorAccess.flatMap((a) =>
        a.verbs.map(
          (v) =>
            `${a.kind.group}/${a.subresource ? `${a.kind.plural}/${a.subresource}` : a.kind.plural}:${v}`,
        ),
      ),
    );
    assert.deepEqual([...granted].sort(), [...declared].sort());
    for (const r of role.rules) {
      assert.ok(!r.verbs.includes("*") && !r.resources.includes("*") && !r.apiGroups.includes("*"));
    }
    // Secrets: created (model URIs with credentials in them), never changed or deleted.
    assert.ok(granted.has("/secrets:create"));
    for (const verb of ["patch", "update", "delete", "deletecollection"])
      assert.ok(!granted.has(`/secrets:${verb}`), `secrets:${verb}`);
  });

  it("holds the Secrets the operator creates to the model URI type with an admission policy", () => {
    const objects = rbacManifests("ops");
    const policy = objects.find((o) => o.kind === "ValidatingAdmissionPolicy") as unknown as {
      metadata: { name: string };
      spec: {
        failurePolicy: string;
        matchConstraints: { resourceRules: { operations: string[]; resources: string[] }[] };
        matchConditions: { expression: string }[];
        validations: { expression: string }[];
      };
    };
    assert.equal(policy.spec.failurePolicy, "Fail");
    assert.deepEqual(policy.spec.matchConstraints.resourceRules[0]?.resources, ["secrets"]);
    assert.deepEqual(policy.spec.matchConstraints.resourceRules[0]?.operations, ["CREATE"]);
    assert.match(policy.spec.matchConditions[0]!.expression, /system:serviceaccount:ops:mlmodel-operator/);
    assert.equal(policy.spec.validations[0]?.expression, `object.type == '${uriSecretType}'`);
    const binding = objects.find((o) => o.kind === "ValidatingAdmissionPolicyBinding") as unknown as {
      spec: { policyName: string; validationActions: string[] };
    };
    assert.deepEqual(binding.spec, { policyName: policy.metadata.name, validationActions: ["Deny"] });
  });

  it("merges resources that share a group and verbs", () => {
    const rules = rulesFor(operatorAccess);
    const core = rules.find((r) => r.apiGroups[0] === "" && r.verbs.join() === "get,list,watch");
    assert.deepEqual(core?.resources, ["configmaps", "pods"]);
  });
});
