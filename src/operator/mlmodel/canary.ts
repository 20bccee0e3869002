/**
 * The canary sub-reconciler (docs/canary.md): what the MLModel reconcile does for a model
 * whose spec has rollout.canary, or whose status remembers one. The decisions are the pure
 * functions of src/operator/canary/; this file gathers their inputs and turns their answer
 * into children and status. Its seam with the reconcile's stages:
 *
 *   reads    CanaryView: of the observation, the model, its children, its serving and
 *            download pods, and CanaryObservation (observeCanary: HTTPRoutes served, names
 *            another owner holds), nothing else
 *   decide   decideCanaryStage -> CanaryStage: what the stable and canary Deployments serve
 *            (Decision.canary; decide.ts serves stableServing as the model's plan)
 *   sync     desiredCanaryServing -> the serving children to apply (ServingSet)
 *   assess   withCanary -> the status with the canary's part; canaryWakes -> when it looks again
 *
 * A model that never had a canary never comes here: its reconcile has no canary step, and
 * writes nothing for one.
 */
import type { V1ControllerRevision, V1Deployment, V1Job, V1Pod } from "@kubernetes/client-node";
import type { CanaryStatus, MLModel, MLModelSpec, MLModelStatus } from "../../api/mlmodel.ts";
import { redactText } from "../../downloader/redact.ts";
import {
  builtinKinds,
  type KubeObject,
  type OwnerReference,
  type ResourceKind,
} from "../../runtime/index.ts";
import { readCommands } from "../canary/commands.ts";
import {
  canaryNames,
  desiredCanaryChildren,
  httpRouteKind,
  ownershipConflict,
  type Scale,
  splitFor,
  splitView,
  trackLabel,
} from "../canary/desired.ts";
import { canaryHealth } from "../canary/health.ts";
import { observedShares, type RouteWeights, type SplitMode } from "../canary/split.ts";
import { type CanaryDecision, decideCanary, isRunning, type Serve } from "../canary/state.ts";
import { canaryCondition, canaryConditionType, canaryUrls, servingRevisions } from "../canary/status.ts";
import { type CanaryPlan, canaryDefaults, canaryPlan, type GatewayRouting } from "../canary/steps.ts";
import { desiredAutoscaler, desiredDisruptionBudget, desiredService } from "../desired.ts";
import { childNames, labels } from "../names.ts";
import { defaults, type RecordedSource, type ServingPlan } from "../plan.ts";
import { isPodReady, terminationMessage } from "../pods.ts";
import { recordedSource, revisionHash, revisionSpec, specServedAgain } from "../revisions.ts";
import { deploymentRevision, jobEnd, jobState } from "../status.ts";
import type { ReadContext } from "./context.ts";
import type { CanaryObservation, Children, Observation } from "./observation.ts";
import type { ServingSet } from "./syncers/serving.ts";
import { failureRecordedWakeMs, type Wake, wakeAfter } from "./wake-up.ts";

/** What the canary reads of the observation (see the seam above). */
export type CanaryView = Pick<
  Observation,
  "key" | "model" | "now" | "children" | "pods" | "downloadPods" | "canary"
>;

/** Whether the model goes through the canary stages: a canary is configured, or one ran. */
export function usesCanary(model: MLModel): boolean {
  return model.spec.rollout?.canary !== undefined || model.status?.canary !== undefined;
}

/**
 * The serving pods of a model that uses a canary: observe reads them for every such model
 * (serving-pods.ts). Missing, they would read as none ready, so a bug is an error, never a
 * canary judged on no pods.
 */
function servingPods(o: CanaryView): readonly V1Pod[] {
  if (!o.pods)
    throw new Error(
      `the serving pods of ${o.key} were not read: observe reads them for every model that uses a canary`,
    );
  return o.pods;
}

export function isCanaryPod(pod: V1Pod): boolean {
  return pod.metadata?.labels?.[trackLabel] === "canary";
}

// ---------------------------------------------------------------------------------- observe

export function childKey(kind: string, name: string | undefined): string {
  return `${kind}/${name ?? ""}`;
}

export function observeCanary(ctx: ReadContext, model: MLModel): CanaryObservation {
  const gatewayServed = ctx.served(httpRouteKind);
  const conflicts = new Map<string, string>();
  if (!usesCanary(model)) return { gatewayServed, conflicts };
  const name = model.metadata.name!;
  const namespace = model.metadata.namespace!;
  const candidates: [ResourceKind, string][] = [
    [builtinKinds.Deployment, canaryNames.deployment(name)],
    [builtinKinds.Service, canaryNames.stableService(name)],
    [builtinKinds.Service, canaryNames.canaryService(name)],
    ...(gatewayServed ? [[httpRouteKind, canaryNames.route(name)] as [ResourceKind, string]] : []),
  ];
  for (const [kind, child] of candidates) {
    const existing = ctx.cache(kind).get({ namespace, name: child });
    const why = existing && ownershipConflict({ ...existing, kind: kind.kind }, model.metadata.uid!);
    if (why) conflicts.set(childKey(kind.kind, child), why);
  }
  return { gatewayServed, conflicts };
}

// ----------------------------------------------------------------------------------- decide

export interface CanaryStage {
  /** spec.rollout.canary, normalised; undefined when it is not (or no longer) set. */
  steps?: CanaryPlan;
  decision: CanaryDecision;
  /** The plan the stable Deployment serves (while promoting: the canary's revision). */
  stableServing: ServingPlan;
  /** The plan the canary Deployment runs (split, promoting, aborting). */
  canaryServing?: ServingPlan;
  /** The canary's content must be downloaded before the serving children move (split, promoting). */
  downloadsCanary: boolean;
  mode: SplitMode;
  scale: Scale;
  /** Routing through an HTTPRoute: asked for, and the cluster serves the kind. */
  gateway?: GatewayRouting;
}

export interface CanaryDecideInput {
  specPlan: ServingPlan;
  specRevision: string;
  /** The spec's revision record about to be written (its number is the newest). */
  revisionToRecord?: V1ControllerRevision;
  /**
   * The serving plan of a spec (undefined when it has none: an unknown runtime...); `recorded`:
   * a revision's content and URI Secret, when its URI was recorded redacted.
   */
  planOf(spec: MLModelSpec, recorded?: RecordedSource): ServingPlan | undefined;
}

export function decideCanaryStage(o: CanaryView, input: CanaryDecideInput): CanaryStage {
  const { model } = o;
  const name = model.metadata.name!;
  const { specPlan, specRevision } = input;
  const planOfRevision = revisionPlans(model, o.children.revisions, input);
  const lastReady = model.status?.revision?.lastReady;
  const stable = lastReady && planOfRevision(lastReady) ? lastReady : undefined;
  const steps = canaryPlan(model.spec);
  const mode: SplitMode = steps?.gateway ? "GatewayAPI" : "Replicas";
  const { stable: stableLive, canary: canaryLive } = deploymentsOf(o.children, name);
  const scale = scaleOf(model.spec, stableLive);
  const canaryPods = servingPods(o).filter(
    (p) => isCanaryPod(p) && p.metadata?.labels?.[labels.revision] === specRevision,
  );
  const numbers = revisionNumbers(o.children.revisions, input.revisionToRecord);
  const decided = decideCanary({
    now: o.now,
    specRevision,
    ...(stable ? { stableRevision: stable } : {}),
    ...(steps ? { plan: steps } : {}),
    ...(model.status?.canary ? { previous: model.status.canary } : {}),
    ...(model.status?.revision?.failed ? { failed: model.status.revision.failed } : {}),
    autoRollback: model.spec.rollout?.autoRollback !== false,
    gatewayServed: o.canary.gatewayServed,
    commands: readCommands(model.metadata.annotations, model.status?.canary, model.metadata.generation),
    health: canaryHealth({
      pods: canaryPods,
      ...(canaryLive ? { deployment: canaryLive } : {}),
      ...optionalField("downloadFailure", downloadFailure(o, specPlan)),
      maxRestarts: steps?.maxRestarts ?? canaryDefaults.maxRestarts,
      maxUnreadySeconds: steps?.maxUnreadySeconds ?? canaryDefaults.maxUnreadySeconds,
      now: o.now,
    }),
    split: (percent) =>
      splitView(splitFor(mode, scale, percent), {
        ...(canaryLive ? { deployment: canaryLive } : {}),
        revision: specRevision,
        readyPods: canaryPods.filter(isPodReady).length,
      }),
    canaryGone: canaryLive === undefined,
    numberOf: (hash) => numbers.get(hash),
  });
  const decision = waitOnNameConflict(decided, o.canary.conflicts, name, mode);
  const serve = decision.serve;
  const canaryRuns = serve.kind === "single" ? undefined : serve.canary;
  const canaryServing = canaryRuns ? planOfRevision(canaryRuns) : undefined;
  return {
    ...(steps ? { steps } : {}),
    decision,
    stableServing: planOfRevision(stableRevisionOf(serve)) ?? specPlan,
    ...(canaryServing ? { canaryServing } : {}),
    downloadsCanary: serve.kind === "split" || serve.kind === "promoting",
    mode,
    scale,
    ...(steps?.gateway && o.canary.gatewayServed ? { gateway: steps.gateway } : {}),
  };
}

/** The revision the stable Deployment runs for a decision. */
function stableRevisionOf(serve: Serve): string {
  switch (serve.kind) {
    case "single":
      return serve.revision;
    case "promoting":
      return serve.canary;
    default:
      return serve.stable;
  }
}

/**
 * The serving plan of a revision: the spec's own, or a recorded revision's serving spec with the
 * user's scaling and the current rollout block (a revision hashes the pod template only, so the
 * rollout settings of today apply to every Deployment).
 */
function revisionPlans(
  model: MLModel,
  revisions: readonly V1ControllerRevision[],
  input: CanaryDecideInput,
): (hash: string) => ServingPlan | undefined {
  return (hash) => {
    if (hash === input.specRevision) return input.specPlan;
    const recorded = revisions.find((r) => revisionHash(r) === hash);
    const spec = recorded && revisionSpec(recorded);
    if (!spec) return undefined;
    return input.planOf(specServedAgain(spec, model.spec), recordedSource(recorded));
  };
}

function revisionNumbers(
  revisions: readonly V1ControllerRevision[],
  toRecord: V1ControllerRevision | undefined,
): Map<string, number> {
  const numbers = new Map<string, number>();
  for (const r of [...revisions, ...(toRecord ? [toRecord] : [])]) {
    const hash = revisionHash(r);
    if (hash) numbers.set(hash, r.revision);
  }
  return numbers;
}

function deploymentsOf(children: Children, model: string): { stable?: V1Deployment; canary?: V1Deployment } {
  const named = (name: string) => children.deployments.find((d) => d.metadata?.name === name);
  const stable = named(childNames.deployment(model));
  const canary = named(canaryNames.deployment(model));
  return { ...(stable ? { stable } : {}), ...(canary ? { canary } : {}) };
}

/** Fixed replicas, or what the autoscaler gave the stable Deployment. */
function scaleOf(spec: MLModelSpec, stable: V1Deployment | undefined): Scale {
  const bounds = spec.autoscaling;
  if (!bounds) return { fixed: spec.replicas ?? defaults.replicas };
  const min = bounds.minReplicas ?? defaults.replicas;
  if (min === 0) return { fixed: 0 };
  return { autoscaled: { stable: stable?.spec?.replicas ?? min, maxReplicas: bounds.maxReplicas } };
}

/** Why the canary's download failed (its Job's final verdict), in the downloader's words when it said. */
function downloadFailure(o: CanaryView, plan: ServingPlan): string | undefined {
  if (plan.source.type !== "download") return undefined;
  const jobName = plan.source.jobName;
  const job = o.children.jobs.find((j) => j.metadata?.name === jobName);
  if (jobState(job) !== "Failed") return undefined;
  const end = jobEnd(job as V1Job);
  const said = o.downloadPods
    .filter((p) => p.metadata?.labels?.["job-name"] === jobName)
    .map((p) => terminationMessage(p, "download"))
    .find((m) => m !== undefined);
  // The downloader redacts its own message; an older or foreign image might not.
  return redactText(
    `Job ${jobName} failed (${end?.reason ?? "Failed"}): ${said ?? end?.message ?? "no message from the downloader"}`,
  );
}

/**
 * The split needs the canary's Deployment and Services (and route) names. When an object of
 * another owner holds one, the operator never applies over it: the canary waits (NameConflict)
 * and the stable revision serves alone, until the name is free.
 */
function waitOnNameConflict(
  decision: CanaryDecision,
  conflicts: ReadonlyMap<string, string>,
  model: string,
  mode: SplitMode,
): CanaryDecision {
  const serve = decision.serve;
  if (serve.kind !== "split" || !decision.status || conflicts.size === 0) return decision;
  const needed = [
    childKey("Deployment", canaryNames.deployment(model)),
    childKey("Service", canaryNames.stableService(model)),
    childKey("Service", canaryNames.canaryService(model)),
    ...(mode === "GatewayAPI" ? [childKey("HTTPRoute", canaryNames.route(model))] : []),
  ];
  const taken = needed.flatMap((key) => conflicts.get(key) ?? []);
  if (taken.length === 0) return decision;
  const { stepReadyAt: _r, pauseEndsAt: _p, ...kept } = decision.status;
  const status: CanaryStatus = {
    ...kept,
    phase: "Waiting",
    reason: "NameConflict",
    message: `the canary of revision ${decision.status.revisionNumber ?? serve.canary} waits: ${taken.join("; ")}. Rename or delete that object (the canary's children are named ${model}-canary and ${model}-stable); the stable revision serves all traffic meanwhile`,
    summary: `rev ${decision.status.revisionNumber ?? serve.canary.slice(0, 7)} waiting (name conflict)`,
  };
  return { serve: { kind: "single", revision: serve.stable }, status };
}

function optionalField<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

// ------------------------------------------------------------------------------------- sync

/**
 * The serving children with a canary: the stable Deployment (and, in a split, the canary
 * Deployment), the model's Service and the per-revision ones, the HTTPRoute, and the
 * autoscaler and budget as without a canary. Never an object whose name another owner holds.
 */
export function desiredCanaryServing(o: CanaryView, stage: CanaryStage, owner: OwnerReference): ServingSet {
  const name = o.model.metadata.name!;
  const plan = stage.stableServing;
  const serve = stage.decision.serve;
  const { stable, canary } = deploymentsOf(o.children, name);
  const autoscaler = o.children.autoscalers.find((a) => a.metadata?.name === childNames.autoscaler(name));
  const canaryRuns = serve.kind === "single" ? undefined : serve.canary;
  const ready = servingPods(o).filter(
    (p) => p.metadata?.labels?.[labels.component] === "server" && isPodReady(p),
  );
  const children = desiredCanaryChildren({
    serve,
    stablePlan: plan,
    ...(stage.canaryServing ? { canaryPlan: stage.canaryServing } : {}),
    owner,
    mode: stage.mode,
    scale: stage.scale,
    ...(stage.gateway ? { gateway: stage.gateway } : {}),
    live: {
      ...(stable ? { deployment: stable } : {}),
      ...(autoscaler ? { autoscaler } : {}),
      ...(canary ? { canary } : {}),
      stableReady: ready.filter((p) => !isCanaryPod(p)).length,
      canaryReady: ready.filter((p) => isCanaryPod(p) && p.metadata?.labels?.[labels.revision] === canaryRuns)
        .length,
    },
  });
  const free =
    (kind: string) =>
    (child: { metadata?: { name?: string } }): boolean =>
      !o.canary.conflicts.has(childKey(kind, child.metadata?.name));
  const autoscalerWanted = desiredAutoscaler(plan, owner);
  const budget = desiredDisruptionBudget(plan, owner);
  return {
    deployments: [
      children.stableDeployment,
      ...(children.canaryDeployment ? [children.canaryDeployment] : []),
    ].filter(free("Deployment")),
    services: [desiredService(plan, owner), ...children.services].filter(free("Service")),
    autoscalers: autoscalerWanted ? [autoscalerWanted] : [],
    budgets: budget ? [budget] : [],
    routes: children.route && o.canary.gatewayServed ? [children.route].filter(free("HTTPRoute")) : [],
  };
}

// ----------------------------------------------------------------------------------- assess

/**
 * The canary's part of the status: status.canary (with the per-revision URLs while it runs),
 * each revision serving with its replicas and share, the Canary condition, and the spec's
 * revision as current while its canary runs (the stable one is still lastReady).
 */
export function withCanary(
  status: MLModelStatus,
  o: CanaryView,
  stage: CanaryStage,
  synced: { serving: ServingSet; revisions: readonly V1ControllerRevision[] },
  specRevision: string,
  rolledBack: boolean,
): MLModelStatus {
  const { model } = o;
  const name = model.metadata.name!;
  const next = stage.decision.status;
  const running = isRunning(next);
  const canary = next ? withUrls(next, running, name, model.metadata.namespace!, stage) : undefined;
  const revision = status.revision;
  const current =
    running && next?.revision === specRevision && !rolledBack ? specRevision : revision?.current;
  const condition = canaryCondition(canary, model.status?.conditions, model.metadata.generation ?? 0, o.now);
  const conditions = (status.conditions ?? []).filter((c) => c.type !== canaryConditionType);
  return {
    ...status,
    conditions: condition ? [...conditions, condition] : conditions,
    ...(revision
      ? {
          revision: {
            ...revision,
            ...(current ? { current } : {}),
            serving: servingNow(o, synced, stage.mode),
          },
        }
      : {}),
    ...(canary ? { canary } : {}),
  };
}

function withUrls(
  canary: CanaryStatus,
  running: boolean,
  model: string,
  namespace: string,
  stage: CanaryStage,
): CanaryStatus {
  const { stableURL: _s, canaryURL: _c, ...rest } = canary;
  if (!running || !stage.canaryServing) return rest;
  const plan = stage.canaryServing;
  return { ...rest, ...canaryUrls(model, namespace, { restPort: plan.restPort, grpcPort: plan.grpcPort }) };
}

/** status.revision.serving: the stable Deployment's revision and the canary's, as they stand. */
function servingNow(
  o: CanaryView,
  { serving, revisions }: { serving: ServingSet; revisions: readonly V1ControllerRevision[] },
  mode: SplitMode,
): ReturnType<typeof servingRevisions> {
  const name = o.model.metadata.name!;
  const numbers = revisionNumbers(revisions, undefined);
  const pods = servingPods(o).filter(
    (p) => p.metadata?.labels?.[labels.component] === "server" && !p.metadata?.deletionTimestamp,
  );
  const observe = (deployment: V1Deployment | undefined, canaryTrack: boolean) => {
    const revision = deployment && deploymentRevision(deployment);
    if (!revision) return undefined;
    const mine = pods.filter((p) => isCanaryPod(p) === canaryTrack);
    const number = numbers.get(revision);
    return {
      revision,
      ...(number !== undefined ? { number } : {}),
      replicas: mine.length,
      readyReplicas: mine.filter(isPodReady).length,
    };
  };
  const named = (n: string) => serving.deployments.find((d) => d.metadata?.name === n);
  const stable = observe(named(childNames.deployment(name)), false);
  const canary = observe(named(canaryNames.deployment(name)), true);
  const shares = observedShares(
    mode,
    { stable: stable?.readyReplicas ?? 0, canary: canary?.readyReplicas ?? 0 },
    routeWeights(serving.routes, name),
  );
  return servingRevisions(stable, canary, shares);
}

/** The weights the route applies to the per-revision Services; undefined when it sends to the model's Service. */
function routeWeights(routes: readonly KubeObject[], model: string): RouteWeights | undefined {
  const route = routes.find((r) => r.metadata.name === canaryNames.route(model));
  const refs =
    (route?.spec as { rules?: { backendRefs?: { name?: string; weight?: number }[] }[] } | undefined)
      ?.rules?.[0]?.backendRefs ?? [];
  const weight = (service: string) => refs.find((b) => b.name === service)?.weight ?? 0;
  const stable = weight(canaryNames.stableService(model));
  const canary = weight(canaryNames.canaryService(model));
  if (stable + canary === 0) return undefined;
  const canaryShare = Math.round((100 * canary) / (stable + canary));
  return { stable: 100 - canaryShare, canary: canaryShare };
}

/** Come back this soon after a canary's transition, so its next step is judged on the new memory. */
export const canaryRecheckMs = 500;

/**
 * When to reconcile again for the canary's sake: a timed pause's end; right after an automatic
 * abort is recorded (the rollback follows, as for any failed revision); and after any change
 * of the canary's step or phase, or of the last ready revision (a promotion completing), which
 * no watch event would bring.
 */
export function canaryWakes(
  stage: CanaryStage,
  before: MLModelStatus | undefined,
  after: MLModelStatus,
  now: number,
): Wake[] {
  const { decision } = stage;
  if (decision.failed) return wakeAfter("failure recorded", now, failureRecordedWakeMs);
  const was = before?.canary;
  const is = after.canary;
  const moved =
    isRunning(is) &&
    (was?.phase !== is?.phase ||
      was?.step !== is?.step ||
      was?.reason !== is?.reason ||
      before?.revision?.lastReady !== after.revision?.lastReady);
  return [
    ...wakeAfter("canary", now, decision.requeueAfterMs),
    ...wakeAfter("canary", now, moved ? canaryRecheckMs : undefined),
  ];
}
