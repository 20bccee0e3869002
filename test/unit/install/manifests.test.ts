import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { deployDir, renderManifestFiles } from "../../../src/install/generate.ts";
import { rbacManifests, rulesFor } from "../../../src/install/manifests.ts";
import { operatorAccess } from "../../../src/operator/access.ts";

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
    assert.ok(!granted.has("/secrets:create") && !granted.has("/secrets:patch"), "secrets are read-only");
  });

  it("merges resources that share a group and verbs", () => {
    const rules = rulesFor(operatorAccess);
    const core = rules.find((r) => r.apiGroups[0] === "" && r.verbs.join() === "get,list,watch");
    assert.deepEqual(core?.resources, ["configmaps", "pods", "secrets"]);
  });
});
