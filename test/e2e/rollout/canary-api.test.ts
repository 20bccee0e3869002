/**
 * spec.rollout.canary as the API server enforces it (schema + CEL of the installed CRD): a
 * mistake is rejected naming the field and what would be right, valid canaries are accepted
 * and defaulted.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { install } from "../../../src/install/install.ts";
import { ApiError, type KubeClient } from "../../../src/runtime/index.ts";
import { createNamespace, type TestNamespace } from "../../harness/cluster.ts";
import { adminClient } from "../operator/helpers.ts";

const model = { uri: "s3://bucket/resnet", format: "tensorflow" };
const gateway = { parentRefs: [{ name: "public", namespace: "infra" }] };

// [what is wrong, spec, field the message must name, words it must contain]
const cases: [string, Record<string, unknown>, string, RegExp][] = [
  [
    "trafficPercent and steps together",
    { model, rollout: { canary: { trafficPercent: 10, steps: [{ trafficPercent: 20 }] } } },
    "spec.rollout.canary.steps",
    /either trafficPercent .* or steps .*, not both/,
  ],
  [
    "neither trafficPercent nor steps",
    { model, rollout: { canary: { maxRestarts: 1 } } },
    "spec.rollout.canary.trafficPercent",
    /set trafficPercent \(e\.g\. 10\) or steps/,
  ],
  [
    "steps that take traffic away",
    { model, rollout: { canary: { steps: [{ trafficPercent: 50 }, { trafficPercent: 10 }] } } },
    "spec.rollout.canary.steps",
    /greater than the step before it, e\.g\. 10, 25, 50/,
  ],
  [
    "two steps at the same percent",
    { model, rollout: { canary: { steps: [{ trafficPercent: 10 }, { trafficPercent: 10 }] } } },
    "spec.rollout.canary.steps",
    /greater than the step before it/,
  ],
  [
    "a zero percent canary",
    { model, rollout: { canary: { trafficPercent: 0 } } },
    "spec.rollout.canary.trafficPercent",
    /greater than or equal to 1/,
  ],
  [
    "more than all the traffic",
    { model, rollout: { canary: { steps: [{ trafficPercent: 150 }] } } },
    "spec.rollout.canary.steps[0].trafficPercent",
    /less than or equal to 100/,
  ],
  [
    "a step without its percent",
    { model, rollout: { canary: { steps: [{ pause: { durationSeconds: 60 } }] } } },
    "spec.rollout.canary.steps[0].trafficPercent",
    /Required/,
  ],
  [
    "a pause of zero seconds",
    { model, rollout: { canary: { steps: [{ trafficPercent: 10, pause: { durationSeconds: 0 } }] } } },
    "spec.rollout.canary.steps[0].pause.durationSeconds",
    /greater than or equal to 1/,
  ],
  [
    "more than 20 steps",
    {
      model,
      rollout: { canary: { steps: Array.from({ length: 21 }, (_, i) => ({ trafficPercent: i + 1 })) } },
    },
    "spec.rollout.canary.steps",
    /must have at most 20 items/,
  ],
  [
    "negative maxRestarts",
    { model, rollout: { canary: { trafficPercent: 10, maxRestarts: -1 } } },
    "spec.rollout.canary.maxRestarts",
    /greater than or equal to 0/,
  ],
  [
    "gatewayAPI without parentRefs",
    { model, rollout: { canary: { trafficPercent: 10, trafficRouting: { gatewayAPI: {} } } } },
    "spec.rollout.canary.trafficRouting.gatewayAPI.parentRefs",
    /Required/,
  ],
  [
    "gatewayAPI with an empty parentRefs",
    {
      model,
      rollout: { canary: { trafficPercent: 10, trafficRouting: { gatewayAPI: { parentRefs: [] } } } },
    },
    "spec.rollout.canary.trafficRouting.gatewayAPI.parentRefs",
    /at least 1 items/,
  ],
  [
    "a parentRef in a namespace that is no DNS name",
    {
      model,
      rollout: {
        canary: {
          trafficPercent: 10,
          trafficRouting: { gatewayAPI: { parentRefs: [{ name: "gw", namespace: "Infra" }] } },
        },
      },
    },
    "spec.rollout.canary.trafficRouting.gatewayAPI.parentRefs[0].namespace",
    /lowercase DNS name: .* got "Infra"/,
  ],
  [
    "a host name with capitals",
    {
      model,
      rollout: {
        canary: {
          trafficPercent: 10,
          trafficRouting: { gatewayAPI: { ...gateway, hostnames: ["Models.Example.com"] } },
        },
      },
    },
    "spec.rollout.canary.trafficRouting.gatewayAPI.hostnames[0]",
    /lowercase host name such as models.example.com or \*\.example\.com; got "Models.Example.com"/,
  ],
  [
    "an HTTPRoute split of a gRPC-only model",
    {
      model,
      endpoint: { protocol: "gRPC" },
      rollout: { canary: { trafficPercent: 10, trafficRouting: { gatewayAPI: gateway } } },
    },
    "spec.rollout.canary.trafficRouting.gatewayAPI",
    /needs endpoint.protocol REST or Both/,
  ],
];

function mlmodel(ns: string, name: string, spec: Record<string, unknown>) {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: { name, namespace: ns },
    spec,
  };
}

describe("spec.rollout.canary is validated by the API server", () => {
  let ns: TestNamespace;
  let admin: KubeClient;

  before(async () => {
    admin = await adminClient();
    await install(admin);
    ns = await createNamespace("e2e-canary-api");
  });
  after(async () => ns?.delete());

  cases.forEach(([what, spec, field, words], i) => {
    it(`${what}: names ${field}`, async () => {
      const err = await admin.create(mlModelKind, mlmodel(ns.name, `bad-${i}`, spec)).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof ApiError, `expected the API server to reject it, got ${String(err)}`);
      assert.equal(err.code, 422);
      assert.ok(err.message.includes(`${field}:`), `message does not name ${field}: ${err.message}`);
      assert.match(err.message, words);
    });
  });

  it("accepts one percentage and defaults the health limits", async () => {
    const created = (await admin.create(
      mlModelKind,
      mlmodel(ns.name, "simple", { model, rollout: { canary: { trafficPercent: 20 } } }),
    )) as MLModel;
    assert.deepEqual(created.spec.rollout?.canary, {
      trafficPercent: 20,
      maxRestarts: 2,
      maxUnreadySeconds: 60,
    });
  });

  it("accepts increasing steps with timed and indefinite pauses and a Gateway API route", async () => {
    const canary = {
      steps: [
        { trafficPercent: 10, pause: { durationSeconds: 300 } },
        { trafficPercent: 50, pause: {} },
        { trafficPercent: 100 },
      ],
      trafficRouting: {
        gatewayAPI: {
          parentRefs: [{ name: "public", namespace: "infra", sectionName: "https", port: 443 }],
          hostnames: ["models.example.com", "*.models.example.com"],
        },
      },
    };
    const created = (await admin.create(
      mlModelKind,
      mlmodel(ns.name, "steps", { model, endpoint: { protocol: "Both" }, rollout: { canary } }),
    )) as MLModel;
    assert.deepEqual(created.spec.rollout?.canary?.steps, canary.steps);
    assert.deepEqual(created.spec.rollout?.canary?.trafficRouting, canary.trafficRouting);
  });
});
