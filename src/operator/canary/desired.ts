/**
 * The children of a canary, as pure functions of what to serve (state.ts) and the serving
 * plans of the two revisions. Labels:
 *
 *   every serving pod      serving.mlmodel.dev/model=M, app.kubernetes.io/component=server,
 *                          serving.mlmodel.dev/revision=<hash>
 *   canary pods also       serving.mlmodel.dev/track=canary
 *
 * - The model's Service (M) selects model+component: every ready pod of both revisions, so
 *   it splits by replicas. Its selector, and the stable Deployment's (M, immutable), are
 *   unchanged from before canaries existed: no pod is rolled to add a label.
 * - The canary Deployment (M-canary) selects model+component+track=canary. The stable
 *   Deployment's selector also matches canary pods; ReplicaSets and pods carry controller
 *   owner references, so neither Deployment adopts the other's (the overlap only matters to
 *   the autoscaler's metric, see split.ts).
 * - M-stable and M-canary Services select one revision each (by hash): the stable and canary
 *   URLs, and the HTTPRoute's backends.
 */
import type { V1Deployment, V1Service } from "@kubernetes/client-node";
import type { KubeObject, OwnerReference, ResourceKind } from "../../runtime/index.ts";
import { desiredDeployment, desiredService, type LiveScaling } from "../desired.ts";
import { labels, servingSelector } from "../names.ts";
import type { ServingPlan } from "../plan.ts";
import {
  autoscaledSplit,
  gatewaySplit,
  type ReplicaSplit,
  type RouteWeights,
  replicaSplit,
  routeWeights,
  type SplitMode,
  stableReplicasDuring,
} from "./split.ts";
import type { Serve, SplitView } from "./state.ts";
import type { GatewayRouting } from "./steps.ts";

/** Pods of the canary Deployment carry track=canary; the stable's carry no track label. */
export const trackLabel = "serving.mlmodel.dev/track";

/**
 * Names of a canary's children. A model M's canary Service M-canary could collide with the
 * Service of another model named "M-canary" in the namespace: the sync stage must refuse to
 * apply over an object controlled by another owner (conflictingOwner) and say so.
 */
export const canaryNames = {
  deployment: (model: string) => `${model}-canary`,
  stableService: (model: string) => `${model}-stable`,
  canaryService: (model: string) => `${model}-canary`,
  route: (model: string) => model,
};

export const httpRouteKind: ResourceKind = Object.freeze({
  group: "gateway.networking.k8s.io",
  version: "v1",
  kind: "HTTPRoute",
  plural: "httproutes",
  namespaced: true,
});

/** How many replicas the model has: fixed (spec.replicas), or what the autoscaler gave the stable. */
export type Scale = { fixed: number } | { autoscaled: { stable: number; maxReplicas: number } };

/** The replica split of `percent` in `mode`. */
export function splitFor(mode: SplitMode, scale: Scale, percent: number): ReplicaSplit {
  if (mode === "GatewayAPI")
    return gatewaySplit("fixed" in scale ? scale.fixed : scale.autoscaled.stable, percent);
  if ("fixed" in scale) return replicaSplit(scale.fixed, percent);
  return autoscaledSplit(scale.autoscaled.stable, percent, scale.autoscaled.maxReplicas);
}

/**
 * What the state machine needs to know about a step's split: what it gives, and whether the
 * canary Deployment runs the canary revision with all the replicas the split asks, ready.
 */
export function splitView(
  split: ReplicaSplit,
  canary: { deployment?: V1Deployment; revision: string; readyPods: number },
): SplitView {
  const d = canary.deployment;
  const template = d?.spec?.template?.metadata?.labels?.[labels.revision];
  const s = d?.status ?? {};
  const rolledOut =
    d !== undefined &&
    template === canary.revision &&
    d.spec?.replicas === split.canary &&
    (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) &&
    (s.updatedReplicas ?? 0) >= split.canary &&
    (s.replicas ?? 0) === (s.updatedReplicas ?? 0);
  return {
    effectivePercent: split.effectivePercent,
    exact: split.exact,
    ...(split.note ? { note: split.note } : {}),
    ready: split.canary > 0 && rolledOut && canary.readyPods >= split.canary,
  };
}

function withReplicas(deployment: V1Deployment, replicas: number | undefined): V1Deployment {
  const { replicas: _r, ...spec } = deployment.spec!;
  return { ...deployment, spec: { ...spec, ...(replicas !== undefined ? { replicas } : {}) } };
}

/** The canary Deployment: the canary revision's pod template, track=canary, no autoscaler. */
export function desiredCanaryDeployment(
  plan: ServingPlan,
  owner: OwnerReference,
  replicas: number,
): V1Deployment {
  const base = desiredDeployment(plan, owner);
  const selector = { ...servingSelector(plan.name), [trackLabel]: "canary" };
  const template = base.spec!.template;
  return {
    ...base,
    metadata: { ...base.metadata, name: canaryNames.deployment(plan.name) },
    spec: {
      ...base.spec!,
      replicas,
      selector: { matchLabels: selector },
      template: {
        ...template,
        metadata: { ...template.metadata, labels: { ...template.metadata?.labels, [trackLabel]: "canary" } },
      },
    },
  };
}

/** A Service that reaches one revision (or, while promoting, every serving pod). In-cluster only. */
export function desiredRevisionService(
  plan: ServingPlan,
  owner: OwnerReference,
  role: "stable" | "canary",
  revision: string | "all",
): V1Service {
  const base = desiredService(plan, owner);
  const name =
    role === "stable" ? canaryNames.stableService(plan.name) : canaryNames.canaryService(plan.name);
  const selector =
    revision === "all"
      ? servingSelector(plan.name)
      : { ...servingSelector(plan.name), [labels.revision]: revision };
  return {
    ...base,
    metadata: { ...base.metadata, name },
    spec: { ...base.spec, type: "ClusterIP", selector },
  };
}

export interface Backend {
  service: string;
  weight: number;
  /** The Service's REST port (each revision's plan may have its own). */
  port: number | undefined;
}

/** The HTTPRoute: the spec's parents and host names, one rule whose backends split the REST port. */
export function desiredHttpRoute(
  plan: ServingPlan,
  owner: OwnerReference,
  gateway: GatewayRouting,
  backends: readonly Backend[],
): KubeObject | undefined {
  const usable = backends.filter((b) => b.weight > 0 && b.port !== undefined);
  if (usable.length === 0) return undefined;
  const base = desiredService(plan, owner);
  return {
    apiVersion: `${httpRouteKind.group}/${httpRouteKind.version}`,
    kind: httpRouteKind.kind,
    metadata: { ...base.metadata, name: canaryNames.route(plan.name) } as KubeObject["metadata"],
    spec: {
      parentRefs: gateway.parentRefs.map((p) => ({ ...p })),
      ...(gateway.hostnames.length ? { hostnames: [...gateway.hostnames] } : {}),
      rules: [
        {
          backendRefs: usable.map((b) => ({
            group: "",
            kind: "Service",
            name: b.service,
            port: b.port,
            weight: b.weight,
          })),
        },
      ],
    },
  };
}

/**
 * Where the route sends traffic. Outside a split, and while promoting (the stable Deployment
 * rolls to the canary's revision), to the model's Service, which follows every ready pod, so
 * no backend ever runs out of endpoints; while aborting, to the stable revision alone.
 */
export function routeBackends(
  model: string,
  kind: Serve["kind"] | "aborting-canary-kept",
  ports: { stable?: number; canary?: number },
  weights?: RouteWeights,
): Backend[] {
  switch (kind) {
    case "single":
    case "promoting":
    case "aborting":
      return [{ service: model, weight: 100, port: ports.stable }];
    case "aborting-canary-kept":
      return [{ service: canaryNames.stableService(model), weight: 100, port: ports.stable }];
    case "split": {
      const w = weights ?? { stable: 100, canary: 0 };
      return [
        { service: canaryNames.stableService(model), weight: w.stable, port: ports.stable },
        { service: canaryNames.canaryService(model), weight: w.canary, port: ports.canary },
      ];
    }
  }
}

export interface CanaryChildrenInput {
  serve: Serve;
  /** The plan of the stable Deployment's revision (while promoting: of the canary's revision). */
  stablePlan: ServingPlan;
  /** The plan of the canary revision; needed for split, promoting and aborting. */
  canaryPlan?: ServingPlan;
  owner: OwnerReference;
  mode: SplitMode;
  scale: Scale;
  /** Routing through the Gateway API, when asked for and the cluster serves HTTPRoutes. */
  gateway?: GatewayRouting;
  live: LiveScaling & { canary?: V1Deployment; stableReady: number; canaryReady: number };
}

export interface CanaryChildren {
  stableDeployment: V1Deployment;
  /** Absent: the canary Deployment must not exist (delete it). */
  canaryDeployment?: V1Deployment;
  /** The per-revision Services; empty: delete them. */
  services: V1Service[];
  /** Absent: no HTTPRoute (delete ours, if any). */
  route?: KubeObject;
  split?: ReplicaSplit;
  weights?: RouteWeights;
}

/**
 * Every child that depends on the canary, for one reconcile. The model's own Service, the
 * autoscaler and the PodDisruptionBudget are unchanged (desired.ts): the Service and the
 * budget select both revisions' pods, and the autoscaler keeps the stable Deployment.
 */
export function desiredCanaryChildren(input: CanaryChildrenInput): CanaryChildren {
  const { serve, stablePlan, canaryPlan, owner, live } = input;
  const stableBase = desiredDeployment(stablePlan, owner, live);
  const model = stablePlan.name;
  const ports = { stable: stablePlan.restPort, canary: canaryPlan?.restPort };
  const route = (backends: Backend[]) =>
    input.gateway ? desiredHttpRoute(stablePlan, owner, input.gateway, backends) : undefined;

  if (serve.kind === "promoting" || serve.kind === "aborting") {
    const promoting = serve.kind === "promoting";
    const stableDesired = stableBase.spec?.replicas ?? live.deployment?.spec?.replicas ?? 0;
    // Promoting: the canary keeps serving until the stable Deployment serves its revision
    // everywhere (a promotion straight from a wait, with no canary Deployment, makes none).
    // Aborting: the canary stays until the stable has every replica ready again, or goes at
    // once when it serves nothing (crash-looping pods carry no traffic).
    const keepCanary =
      canaryPlan &&
      live.canary !== undefined &&
      (promoting || (live.canaryReady > 0 && live.stableReady < stableDesired));
    if (keepCanary) {
      return {
        stableDeployment: stableBase,
        canaryDeployment: desiredCanaryDeployment(canaryPlan, owner, live.canary?.spec?.replicas ?? 0),
        services: [
          desiredRevisionService(stablePlan, owner, "stable", promoting ? "all" : serve.stable),
          desiredRevisionService(canaryPlan, owner, "canary", serve.canary),
        ],
        ...optional(
          "route",
          route(routeBackends(model, promoting ? "promoting" : "aborting-canary-kept", ports)),
        ),
      };
    }
  }
  if (serve.kind !== "split" || !canaryPlan) {
    return {
      stableDeployment: stableBase,
      services: [],
      ...optional("route", route(routeBackends(model, "single", ports))),
    };
  }

  const split = splitFor(input.mode, input.scale, serve.percent);
  const weights =
    input.mode === "GatewayAPI" ? routeWeights(serve.percent, live.canaryReady, split.canary) : undefined;
  const stableReplicas =
    "fixed" in input.scale && input.mode === "Replicas"
      ? stableReplicasDuring(split, input.scale.fixed, live.canaryReady)
      : stableBase.spec?.replicas;
  return {
    stableDeployment: withReplicas(stableBase, stableReplicas),
    canaryDeployment: desiredCanaryDeployment(canaryPlan, owner, split.canary),
    services: [
      desiredRevisionService(stablePlan, owner, "stable", serve.stable),
      desiredRevisionService(canaryPlan, owner, "canary", serve.canary),
    ],
    ...optional("route", route(routeBackends(model, "split", ports, weights))),
    split,
    ...(weights ? { weights } : {}),
  };
}

function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

/**
 * Why this model may not apply over an existing object of the same name, or undefined when it
 * may (none exists, or this model controls it). A model M's canary Service M-canary would
 * otherwise take the Service of another model named "M-canary". The sync stage refuses, and
 * the canary waits with reason NameConflict.
 */
export function ownershipConflict(
  existing: { kind?: string; metadata?: { name?: string; ownerReferences?: OwnerReference[] } } | undefined,
  ownerUid: string,
): string | undefined {
  if (!existing) return undefined;
  const controller = existing.metadata?.ownerReferences?.find((r) => r.controller);
  if (controller?.uid === ownerUid) return undefined;
  const what = `${existing.kind ?? "object"} ${existing.metadata?.name ?? "?"}`;
  return controller
    ? `${what} belongs to ${controller.kind} ${controller.name}`
    : `${what} exists and is not managed by this model`;
}
