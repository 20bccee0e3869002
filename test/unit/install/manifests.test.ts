import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { downloaderRoleRule } from "../../../src/downloader/contract.ts";
import { deployDir, renderManifestFiles } from "../../../src/install/generate.ts";
import { rbacManifests, rulesFor } from "../../../src/install/manifests.ts";
import {
  admissionPolicies,
  identityPolicy,
  policySpec,
  referencePolicy,
  workloadPolicy,
} from "../../../src/install/policies.ts";
import { leaderElectionAccess, operatorAccess } from "../../../src/operator/access.ts";
import { uriSecretType } from "../../../src/operator/desired.ts";
import { childNames } from "../../../src/operator/names.ts";
import type { KubeObject } from "../../../src/runtime/index.ts";

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
      // Every read is a cache's list and watch.
      assert.ok(!r.verbs.includes("get"), `get ${r.resources.join(", ")}`);
    }
    // Secrets: created (model URIs with credentials in them), never read by name, changed or deleted.
    assert.ok(granted.has("/secrets:create"));
    for (const verb of ["get", "patch", "update", "delete", "deletecollection"])
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
    const core = rules.find((r) => r.apiGroups[0] === "" && r.verbs.join() === "list,watch");
    assert.deepEqual(core?.resources, ["configmaps", "pods"]);
  });
});

interface Policy {
  metadata: { name: string };
  spec: {
    failurePolicy: string;
    matchConstraints: { resourceRules: { apiGroups: string[]; operations: string[]; resources: string[] }[] };
    matchConditions?: { expression: string }[];
    variables?: { name: string; expression: string }[];
    validations: { expression: string; message?: string; messageExpression?: string }[];
  };
}

const policies = (objects: KubeObject[]) =>
  objects.filter((o) => o.kind === "ValidatingAdmissionPolicy") as unknown as Policy[];

describe("admission policies", () => {
  const objects = rbacManifests("ops");

  it("every policy fails closed and is bound to deny", () => {
    const bindings = objects.filter((o) => o.kind === "ValidatingAdmissionPolicyBinding") as unknown as {
      metadata: { name: string };
      spec: { policyName: string; validationActions: string[] };
    }[];
    assert.deepEqual(
      policies(objects).map((p) => p.metadata.name),
      admissionPolicies.map((p) => `mlmodel-operator-${p.suffix}`),
    );
    for (const p of policies(objects)) {
      assert.equal(p.spec.failurePolicy, "Fail", p.metadata.name);
      const binding = bindings.find((b) => b.spec.policyName === p.metadata.name);
      assert.deepEqual(binding?.spec.validationActions, ["Deny"], p.metadata.name);
    }
  });

  it("holds what the operator creates: only its own requests, each kind it writes and could misuse", () => {
    const byOperator = policies(objects).filter((p) => p.spec.matchConditions);
    const matched = byOperator.flatMap((p) =>
      p.spec.matchConstraints.resourceRules.flatMap((r) => r.resources),
    );
    assert.deepEqual(matched.sort(), [
      "deployments",
      "jobs",
      "rolebindings",
      "roles",
      "secrets",
      "serviceaccounts",
    ]);
    for (const p of byOperator)
      assert.equal(
        p.spec.matchConditions![0]!.expression,
        "request.userInfo.username == 'system:serviceaccount:ops:mlmodel-operator'",
      );
  });

  it("pins the download identity to the operator's own: its name, the Role's one rule, the binding's subject", () => {
    const spec = policySpec(identityPolicy, "u");
    const text = JSON.stringify(spec);
    // The Role's rule is derived from the one the downloader needs, field by field.
    const rule = downloaderRoleRule("m");
    for (const group of rule.apiGroups) assert.ok(text.includes(`== ['${group}']`), group);
    assert.ok(text.includes(`object.rules[0].resources == ['${rule.resources[0]}']`));
    assert.ok(text.includes("object.rules[0].resourceNames == [variables.model]"));
    assert.ok(text.includes("object.rules[0].verbs == ['patch']"));
    assert.ok(text.includes(`variables.model + '${childNames.downloader("")}'`));
    assert.match(text, /object\.subjects\.size\(\) == 1/);
    assert.match(text, /automountServiceAccountToken == false/);
    const workloads = JSON.stringify(policySpec(workloadPolicy, "u"));
    assert.match(workloads, /serviceAccountName == variables\.identity/);
    assert.match(workloads, /serviceAccountToken/);
  });

  it("refuses an MLModel naming a Secret, ConfigMap or ServiceAccount its author may not use, naming the permission", () => {
    const spec = policySpec(referencePolicy, "u") as unknown as Policy["spec"];
    assert.equal(spec.matchConstraints.resourceRules[0]!.resources[0], "mlmodels");
    assert.deepEqual(spec.matchConstraints.resourceRules[0]!.operations, ["CREATE", "UPDATE"]);
    assert.equal(spec.matchConditions, undefined, "every author, not only the operator");
    const [secret, config, account, downloadIdentity] = spec.validations;
    const checks = [secret!, config!, account!].map((v) => [
      /resource\('(\w+)'\)/.exec(v.expression)?.[1],
      /check\('(\w+)'\)/.exec(v.expression)?.[1],
      /^'([\w.]+):/.exec(v.messageExpression ?? "")?.[1],
    ]);
    assert.deepEqual(checks, [
      ["secrets", "get", "spec.model.credentialsSecretRef.name"],
      ["configmaps", "get", "spec.model.configMapRef.name"],
      ["pods", "create", "spec.serviceAccountName"],
    ]);
    for (const v of [secret!, config!, account!])
      assert.match(v.messageExpression!, /request\.userInfo\.username \+ ' may not '/);
    // And no model runs its serving pods as its own download identity.
    assert.equal(
      downloadIdentity?.expression,
      `variables.serviceAccount != object.metadata.name + '${childNames.downloader("")}'`,
    );
  });
});

describe("a namespaced install", () => {
  const objects = rbacManifests("ops", { watchNamespaces: ["team-a", "team-b"] });
  type Role = KubeObject & { rules: { apiGroups: string[]; resources: string[]; verbs: string[] }[] };
  const grants = (role: Role) =>
    role.rules.flatMap((r) =>
      r.resources.flatMap((res) => r.verbs.map((v) => `${r.apiGroups[0]}/${res}:${v}`)),
    );

  it("grants cluster-wide only the cluster-scoped kinds: no Secret, pod or workload anywhere else", () => {
    const clusterRole = objects.find((o) => o.kind === "ClusterRole") as Role;
    assert.deepEqual(grants(clusterRole), [
      "serving.mlmodel.dev/clusterservingruntimes:list",
      "serving.mlmodel.dev/clusterservingruntimes:watch",
    ]);
  });

  it("grants the namespaced rights in each watched namespace, bound to the operator", () => {
    const roles = objects.filter(
      (o) => o.kind === "Role" && o.metadata.name === "mlmodel-operator",
    ) as Role[];
    assert.deepEqual(
      roles.map((r) => r.metadata.namespace),
      ["team-a", "team-b"],
    );
    const all = new Set([
      ...grants(objects.find((o) => o.kind === "ClusterRole") as Role),
      ...grants(roles[0]!),
    ]);
    const cluster = rbacManifests("ops").find((o) => o.kind === "ClusterRole") as Role;
    assert.deepEqual(
      [...all].sort(),
      grants(cluster).sort(),
      "together, exactly the cluster-wide install's rights",
    );
    const bindings = objects.filter(
      (o) => o.kind === "RoleBinding" && o.metadata.name === "mlmodel-operator",
    );
    assert.deepEqual(
      bindings.map((b) => [
        b.metadata.namespace,
        (b as unknown as { subjects: { namespace: string }[] }).subjects[0]!.namespace,
      ]),
      [
        ["team-a", "ops"],
        ["team-b", "ops"],
      ],
    );
  });
});

describe("docs/install.md", () => {
  it("its RBAC table lists every right the operator holds, with the generated verbs", () => {
    const text = readFileSync(join(deployDir, "..", "docs", "install.md"), "utf8");
    const rows = [...text.matchAll(/^\| `([\w.-]+)` \| `([\w/]+)` \| ([\w, ]+) \|/gm)].map(
      ([, group, resource, verbs]) => `${group === "core" ? "" : group}/${resource}: ${verbs!.trim()}`,
    );
    const generated = [...operatorAccess, leaderElectionAccess].map(
      (a) =>
        `${a.kind.group}/${a.subresource ? `${a.kind.plural}/${a.subresource}` : a.kind.plural}: ${[...a.verbs].sort().join(", ")}`,
    );
    assert.deepEqual(rows.sort(), generated.sort());
  });
});
