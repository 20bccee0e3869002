import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision, V1Deployment } from "@kubernetes/client-node";
import type { MLModelSpec } from "../../../../src/api/mlmodel.ts";
import {
  type CanaryChildrenInput,
  canaryNames,
  desiredCanaryChildren,
  desiredCanaryDeployment,
  ownershipConflict,
  splitView,
  trackLabel,
} from "../../../../src/operator/canary/desired.ts";
import { contentToKeepWithCanary } from "../../../../src/operator/canary/prune.ts";
import { replicaSplit } from "../../../../src/operator/canary/split.ts";
import { canaryPlan } from "../../../../src/operator/canary/steps.ts";
import {
  desiredDeployment,
  desiredDisruptionBudget,
  servingPodTemplate,
} from "../../../../src/operator/desired.ts";
import { labels } from "../../../../src/operator/names.ts";
import { contentHash, planModel } from "../../../../src/operator/plan.ts";
import type { KubeObject } from "../../../../src/runtime/index.ts";
import { model, owner, tf } from "../fixtures.ts";

const v1: MLModelSpec = { model: { uri: "s3://b/resnet", format: "tensorflow", version: "1" }, replicas: 5 };
const v2: MLModelSpec = { ...v1, model: { ...v1.model, version: "2" } };
const stablePlan = planModel(model(v1), tf);
const canaryPlan_ = planModel(model(v2), tf);
const S = servingPodTemplate(stablePlan).revision;
const X = servingPodTemplate(canaryPlan_).revision;

function children(over: Partial<CanaryChildrenInput> = {}) {
  return desiredCanaryChildren({
    serve: { kind: "split", stable: S, canary: X, percent: 20 },
    stablePlan,
    canaryPlan: canaryPlan_,
    owner,
    mode: "Replicas",
    scale: { fixed: 5 },
    live: { stableReady: 5, canaryReady: 0 },
    ...over,
  });
}

type RouteSpec = { rules: { backendRefs: { name: string }[] }[] };
const backendRefs = (route: KubeObject | undefined) =>
  (route?.spec as RouteSpec | undefined)?.rules[0]?.backendRefs;
const routeNames = (route: KubeObject | undefined) => backendRefs(route)?.map((b) => b.name);
const selector = (svc: { spec?: { selector?: Record<string, string> } }) => svc.spec?.selector;

describe("the canary's children", () => {
  it("keeps the stable Deployment's name, selector and pod labels (no pod rolls to add a label)", () => {
    const c = children();
    const plain = desiredDeployment(stablePlan, owner);
    assert.equal(c.stableDeployment.metadata?.name, "resnet");
    assert.deepEqual(c.stableDeployment.spec?.selector, plain.spec?.selector);
    assert.deepEqual(c.stableDeployment.spec?.template, plain.spec?.template);
  });
  it("gives the canary its own Deployment whose selector matches only canary pods", () => {
    const d = children().canaryDeployment!;
    assert.equal(d.metadata?.name, "resnet-canary");
    assert.deepEqual(d.spec?.selector?.matchLabels, {
      [labels.model]: "resnet",
      [labels.component]: "server",
      [trackLabel]: "canary",
    });
    const podLabels = d.spec?.template.metadata?.labels ?? {};
    assert.equal(podLabels[labels.revision], X);
    for (const [k, v] of Object.entries(d.spec!.selector!.matchLabels!)) assert.equal(podLabels[k], v);
    // The model's Service and the stable Deployment select model+component: canary pods too.
    assert.equal(podLabels[labels.component], "server");
    assert.equal(d.spec?.replicas, 1);
  });
  it("hands stable replicas over only as canary replicas become ready (never below 5 in total)", () => {
    assert.equal(children({ live: { stableReady: 5, canaryReady: 0 } }).stableDeployment.spec?.replicas, 5);
    assert.equal(children({ live: { stableReady: 5, canaryReady: 1 } }).stableDeployment.spec?.replicas, 4);
  });
  it("adds one Service per revision: the stable and the canary URL", () => {
    const [stable, canary] = children().services;
    assert.deepEqual([stable?.metadata?.name, canary?.metadata?.name], ["resnet-stable", "resnet-canary"]);
    assert.equal(selector(stable!)?.[labels.revision], S);
    assert.equal(selector(canary!)?.[labels.revision], X);
    assert.equal(stable?.spec?.type, "ClusterIP");
  });
  it("has no route without the Gateway API", () => {
    assert.equal(children().route, undefined);
  });
  it("makes an HTTPRoute with the spec's parents and weights once the canary is ready", () => {
    const gateway = canaryPlan({
      rollout: {
        canary: {
          trafficPercent: 10,
          trafficRouting: {
            gatewayAPI: {
              parentRefs: [{ name: "public", namespace: "infra" }],
              hostnames: ["m.example.com"],
            },
          },
        },
      },
    })!.gateway!;
    const gw = (canaryReady: number) =>
      children({
        serve: { kind: "split", stable: S, canary: X, percent: 10 },
        mode: "GatewayAPI",
        gateway,
        live: { stableReady: 5, canaryReady },
      });
    const notYet = gw(0);
    assert.equal(notYet.stableDeployment.spec?.replicas, 5, "the stable keeps every replica with a route");
    assert.equal(notYet.canaryDeployment?.spec?.replicas, 1);
    assert.deepEqual(backendRefs(notYet.route), [
      { group: "", kind: "Service", name: "resnet-stable", port: 8501, weight: 100 },
    ]);
    const route = gw(1).route!;
    assert.deepEqual(route.spec, {
      parentRefs: [{ name: "public", namespace: "infra" }],
      hostnames: ["m.example.com"],
      rules: [
        {
          backendRefs: [
            { group: "", kind: "Service", name: "resnet-stable", port: 8501, weight: 90 },
            { group: "", kind: "Service", name: "resnet-canary", port: 8501, weight: 10 },
          ],
        },
      ],
    });
    assert.deepEqual(
      [route.apiVersion, route.kind, route.metadata.name],
      ["gateway.networking.k8s.io/v1", "HTTPRoute", "resnet"],
    );
    assert.deepEqual(route.metadata.ownerReferences, [owner]);
  });
  it("routes to the model's Service outside a split and while promoting", () => {
    const gateway = { parentRefs: [{ name: "public" }], hostnames: [] };
    const promoting = children({
      serve: { kind: "promoting", stable: S, canary: X },
      stablePlan: canaryPlan_,
      mode: "GatewayAPI",
      gateway,
      live: { stableReady: 2, canaryReady: 1, canary: desiredCanaryDeployment(canaryPlan_, owner, 1) },
    });
    assert.deepEqual(routeNames(promoting.route), ["resnet"]);
    assert.equal(
      promoting.stableDeployment.spec?.template.metadata?.labels?.[labels.revision],
      X,
      "the stable Deployment rolls to the canary's revision",
    );
    assert.equal(promoting.stableDeployment.spec?.replicas, 5);
    assert.equal(
      promoting.canaryDeployment?.spec?.replicas,
      1,
      "the canary keeps its replicas until the promotion is done",
    );
    assert.deepEqual(selector(promoting.services[0]!), {
      [labels.model]: "resnet",
      [labels.component]: "server",
    });
    const straight = children({
      serve: { kind: "promoting", stable: S, canary: X },
      stablePlan: canaryPlan_,
      live: { stableReady: 5, canaryReady: 0 },
    });
    assert.deepEqual(
      [straight.canaryDeployment, straight.services],
      [undefined, []],
      "a promotion with no canary Deployment (from a wait, or at 100 %) creates none",
    );
    const single = children({ serve: { kind: "single", revision: S }, mode: "GatewayAPI", gateway });
    assert.deepEqual([single.canaryDeployment, single.services], [undefined, []]);
  });
  it("keeps an aborted canary that serves until the stable has every replica back, not longer", () => {
    const aborting = (stableReady: number, canaryReady: number) =>
      children({
        serve: { kind: "aborting", stable: S, canary: X },
        live: { stableReady, canaryReady, canary: desiredCanaryDeployment(canaryPlan_, owner, 1) },
      });
    const kept = aborting(4, 1);
    assert.equal(kept.stableDeployment.spec?.replicas, 5);
    assert.equal(kept.canaryDeployment?.spec?.replicas, 1);
    assert.equal(aborting(5, 1).canaryDeployment, undefined, "the stable is back: the canary goes");
    assert.equal(aborting(4, 0).canaryDeployment, undefined, "a canary that serves nothing goes at once");
    assert.deepEqual(aborting(4, 0).services, []);
  });
  it("leaves the PodDisruptionBudget selecting both revisions", () => {
    const budget = desiredDisruptionBudget(stablePlan, owner)!;
    const canaryPods = children().canaryDeployment!.spec!.template.metadata!.labels!;
    for (const [k, v] of Object.entries(budget.spec!.selector!.matchLabels!)) assert.equal(canaryPods[k], v);
  });
});

describe("splitView: is a step's split in place?", () => {
  const split = replicaSplit(5, 20);
  const deployment = (
    over: Partial<V1Deployment["status"]> = {},
    replicas = 1,
    revision = X,
  ): V1Deployment => ({
    metadata: { generation: 3 },
    spec: { replicas, selector: {}, template: { metadata: { labels: { [labels.revision]: revision } } } },
    status: { observedGeneration: 3, replicas, updatedReplicas: replicas, readyReplicas: replicas, ...over },
  });
  // [what, deployment, ready pods, ready?]
  const cases: [string, V1Deployment | undefined, number, boolean][] = [
    ["rolled out and ready", deployment(), 1, true],
    ["no Deployment yet", undefined, 0, false],
    ["pods not ready", deployment(), 0, false],
    ["the previous canary revision still in the template", deployment({}, 1, "older"), 1, false],
    ["the Deployment not yet observed", deployment({ observedGeneration: 2 }), 1, false],
    ["old pods still there", deployment({ replicas: 2, updatedReplicas: 1 }), 1, false],
    ["scaled for another step", deployment({}, 2), 2, false],
  ];
  for (const [what, d, readyPods, expected] of cases) {
    it(`${what}: ${expected ? "ready" : "not ready"}`, () => {
      assert.equal(splitView(split, { deployment: d, revision: X, readyPods }).ready, expected);
    });
  }
});

describe("names and ownership", () => {
  it("names the children after the model", () => {
    assert.deepEqual(
      [
        canaryNames.deployment("m"),
        canaryNames.stableService("m"),
        canaryNames.canaryService("m"),
        canaryNames.route("m"),
      ],
      ["m-canary", "m-stable", "m-canary", "m"],
    );
  });
  it("refuses to take an object another model controls", () => {
    const other = {
      kind: "Service",
      metadata: {
        name: "resnet-canary",
        ownerReferences: [{ ...owner, name: "resnet-canary", uid: "uid-2" }],
      },
    };
    assert.equal(ownershipConflict(other, "uid-1"), "Service resnet-canary belongs to MLModel resnet-canary");
    assert.equal(
      ownershipConflict({ kind: "Service", metadata: { name: "x" } }, "uid-1"),
      "Service x exists and is not managed by this model",
    );
    assert.equal(ownershipConflict({ metadata: { ownerReferences: [owner] } }, "uid-1"), undefined);
    assert.equal(ownershipConflict(undefined, "uid-1"), undefined);
  });
});

describe("storage around a canary", () => {
  const rev = (hash: string, n: number, spec: MLModelSpec): V1ControllerRevision => ({
    metadata: { name: `resnet-${hash}`, labels: { [labels.revision]: hash } },
    data: { spec },
    revision: n,
  });
  const revisions = [rev(S, 1, v1), rev(X, 2, v2)];
  it("keeps both versions while the canary runs", () => {
    assert.deepEqual(
      contentToKeepWithCanary([stablePlan, canaryPlan_], revisions, { revision: X, phase: "Paused" }),
      [contentHash(v1), contentHash(v2)].sort(),
    );
  });
  it("prunes an aborted canary's version (the loser) once it no longer serves", () => {
    assert.deepEqual(contentToKeepWithCanary([stablePlan], revisions, { revision: X, phase: "Aborted" }), [
      contentHash(v1),
    ]);
    assert.deepEqual(
      contentToKeepWithCanary([stablePlan, canaryPlan_], revisions, { revision: X, phase: "Aborting" })
        .length,
      2,
      "still serving while aborting: kept",
    );
  });
  it("keeps the old stable's version after a promotion, for a rollback without a download", () => {
    assert.deepEqual(
      contentToKeepWithCanary([canaryPlan_], revisions, { revision: X, phase: "Promoted" }),
      [contentHash(v1), contentHash(v2)].sort(),
    );
  });
});
