/**
 * What one MLModel reconcile observed: plain data, gathered once by the observe stage
 * (observe.ts) and read by every later stage. Types only, so that every stage and the canary
 * sub-reconciler can name what they read without importing the stage that reads the caches.
 */
import type {
  V1ControllerRevision,
  V1Deployment,
  V1Job,
  V1PersistentVolumeClaim,
  V1Pod,
  V1PodDisruptionBudget,
  V1Service,
  V2HorizontalPodAutoscaler,
} from "@kubernetes/client-node";
import type { MLModel } from "../../api/mlmodel.ts";
import type { AnyServingRuntime } from "../../api/servingruntime.ts";
import type { NodeCacheState } from "../../nodecache/contract.ts";
import type { KubeObject } from "../../runtime/index.ts";

/** A referenced object that exists: what the operator may know of it (a Secret's values never). */
export interface Reference {
  resourceVersion?: string;
  /** Keys of its data (a Secret's or ConfigMap's). */
  keys: readonly string[];
  /** uid of its controlling owner, if it has one (whether a URI Secret is ours). */
  controller?: string;
}

/** The children the model controls, by kind, as cached. */
export interface Children {
  revisions: readonly V1ControllerRevision[];
  jobs: readonly V1Job[];
  claims: readonly V1PersistentVolumeClaim[];
  deployments: readonly V1Deployment[];
  services: readonly V1Service[];
  autoscalers: readonly V2HorizontalPodAutoscaler[];
  budgets: readonly V1PodDisruptionBudget[];
  /** HTTPRoutes (a canary's traffic split), while the cluster serves the kind; else none. */
  routes: readonly KubeObject[];
}

export interface Observation {
  /** "namespace/name" of the model. */
  key: string;
  /** The model as the cache holds it. */
  cached: MLModel;
  /** The model with the status this controller last wrote, when the cache has not seen it yet. */
  model: MLModel;
  /** ISO time of this reconcile, for new transitions. */
  now: string;
  runtimes: { namespaced: readonly AnyServingRuntime[]; cluster: readonly AnyServingRuntime[] };
  /**
   * The objects the spec references, those the last ready revision's spec references (a
   * rollback serves that spec), and the Secrets named as the model's URI Secrets (ours or not),
   * that exist: by referenceKey. A missing one is absent.
   */
  references: ReadonlyMap<string, Reference>;
  children: Children;
  /**
   * The model's serving pods, of every revision (a canary's too): read here when the model
   * uses a canary, else after sync while its Deployment has not settled (serving-pods.ts);
   * undefined when not read.
   */
  pods: readonly V1Pod[] | undefined;
  /**
   * What the crashed serving container that status tells as a load failure said, by its
   * crash (pods.ts, CrashedContainer.key); read after the serving pods (crash-logs.ts).
   */
  crashWords?: ReadonlyMap<string, string>;
  /** The model's download pods, of every Job, read only while a Job needs them (download-pods.ts); else none. */
  downloadPods: readonly V1Pod[];
  /** What only a canary needs: whether HTTPRoutes are served, names taken by other owners. */
  canary: CanaryObservation;
  /** The node cache, when the operator has one; absent: every downloaded model uses a claim. */
  nodeCache?: NodeCacheObservation;
}

/** The node cache as one reconcile sees it (node-cache.ts). */
export interface NodeCacheObservation {
  /** Its URL, which the pods the operator builds call. */
  url: string;
  /** The image of the serving pods' cache-copy init container. */
  image: string;
  /**
   * The states of the agents that list a key of this model (its spec's, its status's); none
   * when the operator does not watch the agents' namespace (its --namespace leave it out).
   */
  states?: readonly NodeCacheState[];
  /**
   * Every agent's state, which agents run and where the model's succeeded download Jobs ran:
   * what tells whether a version is still held by some node (refetch.ts). The agents' pods
   * and the Jobs' pods are read only while a succeeded NodeCache Job's key may be gone
   * (observe.ts, mayBeGone); else `agentNodes` and `jobNodes` are absent.
   */
  agents?: AgentsObservation;
}

/** What decides whether a version is still held (refetch.ts, cacheHolders). */
export interface AgentsObservation {
  states: readonly NodeCacheState[];
  /** Nodes where an agent pod runs; absent when not read. */
  agentNodes?: ReadonlySet<string>;
  /** Download Job name -> the node its succeeded pod ran on; absent when not read. */
  jobNodes?: ReadonlyMap<string, string>;
}

/** What only a canary needs of the cluster (canary.ts, observeCanary). */
export interface CanaryObservation {
  /** The cluster serves HTTPRoutes and the cache has listed them. */
  gatewayServed: boolean;
  /** Names of the canary's children that an object this model does not control holds: "Kind/name" -> why. */
  conflicts: ReadonlyMap<string, string>;
}
