/**
 * Stage 2, decide: what this reconcile is about, as a pure function of the observation. The
 * plan of the spec, the revision it makes, whether a rollback serves another spec instead, the
 * canary (what the stable and canary Deployments serve, canary.ts), and which referenced
 * objects are missing. Nothing is written yet.
 */
import type { V1ControllerRevision, V1Deployment } from "@kubernetes/client-node";
import type { MLModel } from "../../api/mlmodel.ts";
import { cacheKeyLabel } from "../../nodecache/contract.ts";
import { builtinKinds, controllerOwnerRef, type ResourceKind } from "../../runtime/index.ts";
import { cacheCopyContainerName, needsUriSecret, servingPodTemplate } from "../desired.ts";
import { childNames } from "../names.ts";
import { PlanError, planned, type RecordedSource, type ServingPlan, type StorageContext } from "../plan.ts";
import { desiredRevision } from "../revisions.ts";
import { activeRollback } from "../rollback.ts";
import { resolveRuntime } from "../runtime-selection.ts";
import type { MissingDependency, Observed } from "../status.ts";
import { referenceKey } from "./caches.ts";
import { type CanaryStage, decideCanaryStage, usesCanary } from "./canary.ts";
import type { Observation, Reference } from "./observation.ts";

export interface Decision {
  /**
   * The plan the model's Deployment serves: the spec's, or while rolled back the last ready
   * revision's; with a canary, the stable revision's (canary.stableServing).
   */
  plan?: ServingPlan;
  /** Why the spec has no plan (unknown runtime, invalid name, ...). */
  planFailure?: Observed["planFailure"];
  /** The revision of the spec as written: recorded whatever is served (history shows it). */
  specRevision?: string;
  /** The ControllerRevision to write for specRevision; none when it is already the newest. */
  revisionToRecord?: V1ControllerRevision;
  /** Set while the spec's revision has failed and the last ready one is served instead. */
  rollback?: NonNullable<ReturnType<typeof activeRollback>>;
  /** Referenced objects of the served plan that do not exist (or lack the key needed). */
  missing: MissingDependency[];
  /**
   * The plans whose exact URI has credentials in it, the spec's and the served one's: each
   * needs its revision's URI Secret, created when the revision is recorded (syncers/uri-secret.ts).
   */
  uriSecretPlans: ServingPlan[];
  /** The model is being deleted: nothing is created or recorded any more. */
  deleting: boolean;
  /** Set when the model has (or had) a canary: its decision and the plans of both Deployments. */
  canary?: CanaryStage;
}

export function decide(o: Observation): Decision {
  const { model } = o;
  const planFor = planner(o);
  const fromSpec = planFor(model);
  const specRevision = fromSpec.plan ? servingPodTemplate(fromSpec.plan).revision : undefined;
  const deleting = Boolean(model.metadata.deletionTimestamp);
  const revisions = o.children.revisions;
  const revisionToRecord =
    specRevision && !deleting
      ? desiredRevision(model, specRevision, controllerOwnerRef(model), revisions)
      : undefined;
  const rollback = activeRollback(model, specRevision, revisions);
  const canary =
    fromSpec.plan && specRevision && usesCanary(model)
      ? decideCanaryStage(o, {
          specPlan: fromSpec.plan,
          specRevision,
          ...(revisionToRecord ? { revisionToRecord } : {}),
          planOf: (spec, recorded) => planFor({ ...model, spec }, recorded).plan,
        })
      : undefined;
  const plan = canary
    ? canary.stableServing
    : rollback
      ? (planFor({ ...model, spec: rollback.spec }, rollback.recorded).plan ?? fromSpec.plan)
      : fromSpec.plan;
  // The canary's references matter while it is downloaded and started (the spec's own).
  const canaryPlan = canary?.downloadsCanary ? canary.canaryServing : undefined;
  const uriSecretPlans = deleting
    ? []
    : [...new Set([fromSpec.plan, plan, canary?.canaryServing])].filter(needingUriSecret);
  return {
    ...(plan ? { plan } : {}),
    ...(fromSpec.planFailure ? { planFailure: fromSpec.planFailure } : {}),
    ...(specRevision ? { specRevision } : {}),
    ...(revisionToRecord ? { revisionToRecord } : {}),
    ...(rollback ? { rollback } : {}),
    missing: [
      ...(plan ? missingDependencies(plan, o.references) : []),
      ...(canaryPlan && canaryPlan !== plan ? missingDependencies(canaryPlan, o.references) : []),
    ],
    uriSecretPlans,
    deleting,
    ...(canary ? { canary } : {}),
  };
}

function needingUriSecret(plan: ServingPlan | undefined): plan is ServingPlan {
  return plan !== undefined && needsUriSecret(plan);
}

type PlanFor = (
  model: MLModel,
  recorded?: RecordedSource,
) => { plan?: ServingPlan; planFailure?: Observed["planFailure"] };

/** The cache-copy init container's image in each live Deployment, by the cache key its pods serve. */
export function servedCacheCopyImages(deployments: readonly V1Deployment[]): ReadonlyMap<string, string> {
  const images = new Map<string, string>();
  for (const d of deployments) {
    const template = d.spec?.template;
    const key = template?.metadata?.labels?.[cacheKeyLabel];
    const image = template?.spec?.initContainers?.find((c) => c.name === cacheCopyContainerName)?.image;
    if (key && image) images.set(key, image);
  }
  return images;
}

/**
 * The serving plan of a model (or of a revision's spec), or why there is none. `recorded`: the
 * revision's content and URI Secret, when its URI was recorded redacted. Every plan of one
 * reconcile sees the same node cache and the same claim.
 */
function planner(o: Observation): PlanFor {
  const { runtimes } = o;
  const claimName = childNames.storage(o.model.metadata.name!);
  // Whether the model has its claim matters only with a node cache (Auto keeps a claim-served
  // model on its claim): without one it is left out, so a new claim does not plan again.
  const storage: StorageContext = o.nodeCache
    ? {
        nodeCacheUrl: o.nodeCache.url,
        cacheCopyImage: o.nodeCache.image,
        hasClaim: o.children.claims.some((c) => c.metadata?.name === claimName),
        servedCacheCopyImages: servedCacheCopyImages(o.children.deployments),
      }
    : {};
  return (model, recorded) => {
    const resolution = resolveRuntime(model, runtimes.namespaced, runtimes.cluster);
    if (!resolution.ok) return { planFailure: resolution };
    try {
      return { plan: planned(model, resolution.runtime, recorded, storage) };
    } catch (err) {
      if (!(err instanceof PlanError)) throw err;
      return {
        planFailure: {
          reason: err.reason,
          message: err.message,
          ...(err.condition ? { condition: err.condition } : {}),
        },
      };
    }
  };
}

/**
 * The plan's Secrets, ConfigMap (and key) and user claim that do not exist, in words a person
 * can act on. A revision served again from its recorded URI (a rollback) reads the exact URI
 * from its URI Secret: without that Secret there is nothing to download from.
 */
export function missingDependencies(
  plan: ServingPlan,
  found: ReadonlyMap<string, Reference>,
): MissingDependency[] {
  const namespace = plan.namespace;
  const lookup = (kind: ResourceKind, name: string) => found.get(referenceKey({ kind, namespace, name }));
  const keysOf = (ref: Reference) => ref.keys.join(", ") || "no keys";
  const missing: MissingDependency[] = [];
  const creds = plan.credentials;
  if (creds) {
    const secret = lookup(builtinKinds.Secret, creds.secretName);
    if (!secret) {
      missing.push({
        reason: "SecretNotFound",
        message: `Secret ${creds.secretName} (spec.model.credentialsSecretRef.name) does not exist in namespace ${namespace}`,
      });
    }
    // Its keys are not checked: the Secret cache holds metadata only (caches.ts).
  }
  const source = plan.source;
  if (source.type === "download" && source.uriSecret && !lookup(builtinKinds.Secret, source.uriSecret)) {
    missing.push({
      reason: "SecretNotFound",
      message: `Secret ${source.uriSecret}, which holds the exact model URI of the revision being served (${source.shownUri}), does not exist in namespace ${namespace}; apply the spec again with its full URI`,
    });
  }
  const config = plan.configFile;
  if (config) {
    const cm = lookup(builtinKinds.ConfigMap, config.configMapName);
    if (!cm) {
      missing.push({
        reason: "ConfigMapNotFound",
        message: `ConfigMap ${config.configMapName} (spec.model.configMapRef.name) does not exist in namespace ${namespace}`,
      });
    } else if (!cm.keys.includes(config.key)) {
      missing.push({
        reason: "ConfigMapKeyNotFound",
        message: `ConfigMap ${config.configMapName} has no key "${config.key}" (spec.model.configMapRef.key); it has: ${keysOf(cm)}`,
      });
    }
  }
  if (plan.source.type === "pvc" && !lookup(builtinKinds.PersistentVolumeClaim, plan.source.claimName)) {
    missing.push({
      reason: "ClaimNotFound",
      message: `PersistentVolumeClaim ${plan.source.claimName} (from spec.model.uri) does not exist in namespace ${namespace}`,
    });
  }
  return missing;
}
