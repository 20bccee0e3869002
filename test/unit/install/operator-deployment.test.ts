import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { operatorPodsFrom } from "../../../src/cli/commands/install.ts";
import { CliError } from "../../../src/cli/errors.ts";
import {
  defaultOperatorImage,
  managerDeployment,
  operatorPodManifests,
} from "../../../src/install/operator-deployment.ts";
import { operatorName } from "../../../src/operator/names.ts";

// biome-ignore lint/suspicious/noExplicitAny: reading a literal Deployment's nested fields.
const container = (d: any) => d.spec.template.spec.containers[0];

describe("the operator's Deployment (mlmodel install --in-cluster, dist/install.yaml)", () => {
  it("runs two leader-elected replicas of the project image, which also runs the download Jobs", () => {
    const d = managerDeployment();
    // biome-ignore lint/suspicious/noExplicitAny: a literal Deployment.
    assert.equal((d as any).spec.replicas, 2);
    const c = container(d);
    assert.equal(c.image, defaultOperatorImage);
    assert.ok(c.args.includes("--leader-elect"));
    assert.ok(c.args.includes(`--downloader-image=${defaultOperatorImage}`));
  });

  it("runs as its own ServiceAccount at the restricted Pod Security level", () => {
    // biome-ignore lint/suspicious/noExplicitAny: a literal Deployment.
    const pod = (managerDeployment() as any).spec.template.spec;
    assert.equal(pod.serviceAccountName, operatorName);
    assert.deepEqual(pod.securityContext, { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
    assert.deepEqual(container({ spec: { template: { spec: pod } } }).securityContext, {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ["ALL"] },
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
    });
  });

  it("takes the image, the replicas and the watched namespaces it is given", () => {
    const d = managerDeployment({
      namespace: "ops",
      image: "registry.example/mlmodel:1",
      replicas: 3,
      watchNamespaces: ["a", "b"],
    });
    assert.equal(d.metadata.namespace, "ops");
    const c = container(d);
    assert.equal(c.image, "registry.example/mlmodel:1");
    assert.ok(c.args.includes("--downloader-image=registry.example/mlmodel:1"));
    assert.deepEqual(
      c.args.filter((a: string) => a.startsWith("--namespace=")),
      ["--namespace=a", "--namespace=b"],
    );
  });

  it("one replica neither elects a leader nor gets a disruption budget that would block every drain", () => {
    const objects = operatorPodManifests({ replicas: 1 });
    assert.deepEqual(
      objects.map((o) => o.kind),
      ["Deployment", "Service"],
    );
    assert.ok(!container(objects[0]).args.includes("--leader-elect"));
    assert.deepEqual(
      operatorPodManifests().map((o) => o.kind),
      ["Deployment", "Service", "PodDisruptionBudget"],
    );
  });
});

describe("mlmodel install --in-cluster flags", () => {
  it("without --in-cluster there are no operator pods", () => {
    assert.equal(operatorPodsFrom({}), undefined);
  });

  it("defaults to two replicas of the project image", () => {
    assert.deepEqual(operatorPodsFrom({ "in-cluster": true }), { image: defaultOperatorImage, replicas: 2 });
    assert.deepEqual(operatorPodsFrom({ "in-cluster": true, image: "r/m:2", replicas: "1" }), {
      image: "r/m:2",
      replicas: 1,
    });
  });

  it("refuses bad values, naming the flag, the value and what is right", () => {
    const refuses = (values: Parameters<typeof operatorPodsFrom>[0], message: RegExp) =>
      assert.throws(
        () => operatorPodsFrom(values),
        (err: unknown) => err instanceof CliError && message.test(err.message),
      );
    refuses({ "in-cluster": true, replicas: "0" }, /--replicas "0" must be a whole number from 1 to 10/);
    refuses({ "in-cluster": true, replicas: "two" }, /--replicas "two" must be a whole number/);
    refuses({ "in-cluster": true, image: "a b" }, /--image "a b" is not an image reference/);
    refuses({ replicas: "3" }, /--replicas configures the operator's pods: add --in-cluster/);
    refuses({ image: "r/m:2" }, /--image configures the operator's pods: add --in-cluster/);
  });
});
