import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  installObjects,
  managerDeployment,
  renderInstallFiles,
  runtimeObjects,
  staleFiles,
} from "../../../scripts/gen-install.ts";
import { rulesFor } from "../../../src/install/manifests.ts";
import { operatorAccess } from "../../../src/operator/access.ts";

describe("install manifests (scripts/gen-install.ts)", () => {
  it("dist/install.yaml, deploy/kustomize and the chart's generated files are current", () => {
    assert.deepEqual(staleFiles(), [], "regenerate with: node scripts/gen-install.ts");
  });

  it("notices a stale file", () => {
    // A checkout without the files: every generated path is reported, so the check can fail.
    assert.deepEqual(staleFiles("/nonexistent"), [...renderInstallFiles().keys()]);
  });

  it("puts CRDs first and leaves the built-in runtimes to a second step", () => {
    const kinds = installObjects().map((o) => o.kind);
    assert.equal(kinds.lastIndexOf("CustomResourceDefinition"), 2);
    assert.ok(!kinds.includes("ClusterServingRuntime"));
    assert.deepEqual(
      runtimeObjects()
        .map((o) => o.metadata.name)
        .sort(),
      ["mlserver", "tensorflow-serving", "torchserve", "triton"],
    );
  });

  it("installs the ClusterRole derived from the controller's declared access", () => {
    const role = installObjects().find((o) => o.kind === "ClusterRole") as unknown as { rules: unknown };
    assert.deepEqual(role.rules, rulesFor(operatorAccess));
  });

  it("runs the manager as the restricted Pod Security level asks, with leader election and probes", () => {
    // biome-ignore lint/suspicious/noExplicitAny: reading a literal Deployment's nested fields.
    const d = managerDeployment() as any;
    assert.equal(d.spec.replicas, 2);
    const pod = d.spec.template.spec;
    assert.equal(pod.securityContext.runAsNonRoot, true);
    assert.equal(pod.securityContext.seccompProfile.type, "RuntimeDefault");
    const [c] = pod.containers;
    assert.deepEqual(c.securityContext, {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ["ALL"] },
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
    });
    assert.ok(c.args.includes("--leader-elect"));
    assert.equal(c.livenessProbe.httpGet.path, "/healthz");
    assert.equal(c.readinessProbe.httpGet.path, "/readyz");
    assert.ok(c.resources.requests.cpu && c.resources.requests.memory);
    assert.equal(c.env[0].valueFrom.fieldRef.fieldPath, "metadata.namespace");
  });
});
