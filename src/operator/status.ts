/**
 * The MLModel's status as a pure function of what the operator observed. It never claims more
 * than it saw: Ready needs every desired replica of the current revision ready, as its pods say,
 * or as its Deployment says once it has settled (mlmodel/serving-pods.ts: the pods are then not
 * read).
 */
import type {
  V1Deployment,
  V1Job,
  V1JobCondition,
  V1PersistentVolumeClaim,
  V1Pod,
  V1Service,
} from "@kubernetes/client-node";
import type { Condition, MLModel, MLModelStatus, Phase } from "../api/mlmodel.ts";
import { redactText, redactUri } from "../downloader/redact.ts";
import type { NodeCacheState } from "../nodecache/contract.ts";
import { trackLabel } from "./canary/desired.ts";
import { labels, selectorString, servingSelector } from "./names.ts";
import { nodeCacheStatus } from "./node-cache.ts";
import { defaults, type ServingPlan } from "./plan.ts";
import {
  type CrashedContainer,
  endedItself,
  isPodReady,
  loadFailure,
  type PodProblem,
  podProblem,
  terminationMessage,
} from "./pods.ts";

/** A referenced object that does not exist (or lacks the key we need). */
export interface MissingDependency {
  reason: "SecretNotFound" | "ConfigMapNotFound" | "ConfigMapKeyNotFound" | "ClaimNotFound";
  message: string;
}

export interface Observed {
  model: MLModel;
  /** ISO time used for new transitions. */
  now: string;
  /** Why no plan could be made (unknown runtime, unsupported protocol), if so. */
  planFailure?: { reason: string; message: string; condition?: "RuntimeResolved" | "StorageReady" };
  plan?: ServingPlan;
  /** The plan whose download `job` is, when not `plan` (a canary's version, downloaded beside it). */
  downloadPlan?: ServingPlan;
  /** Hash of the desired serving pod template: pods with this revision label are current. */
  revision?: string;
  missing: MissingDependency[];
  storage?: V1PersistentVolumeClaim;
  job?: V1Job;
  /** The pods of `job`, when it needs explaining (failed, or no pod ready); else none (mlmodel/download-pods.ts). */
  jobPods: readonly V1Pod[];
  /** The model's Deployment (with a canary, the stable one). */
  deployment?: V1Deployment;
  /**
   * Serving pods of this model, every revision (a canary's too). Undefined when not read:
   * then the Deployment's own counts say all about them (it has settled, or the Deployment
   * controller has not seen it yet, so it has no pod: mlmodel/serving-pods.ts).
   */
  pods: readonly V1Pod[] | undefined;
  /**
   * What crashed serving containers said before they stopped (pods.ts, runtimeWords), by
   * CrashedContainer.key: read from their previous log once per crash (mlmodel/crash-logs.ts).
   */
  crashWords?: ReadonlyMap<string, string>;
  service?: V1Service;
  /**
   * Set when the operator has a node cache: the agents' states that list the model's keys, or
   * none when the operator cannot see them (its namespaces leave out the agents').
   */
  nodeCache?: { states?: readonly NodeCacheState[] };
}

export type ConditionType =
  | "Ready"
  | "RuntimeResolved"
  | "DependenciesReady"
  | "StorageReady"
  | "ModelDownloaded"
  | "ServingReady";

/** Reasons that need a person: Warning events, phase Failed. */
const failureReasons = new Set([
  "RuntimeNotFound",
  "NoRuntimeForFormat",
  "FormatNotSupported",
  "ProtocolNotSupported",
  "NoImage",
  "InvalidName",
  "DownloadFailed",
  "ImagePullBackOff",
  "ModelLoadFailed",
  "CrashLoopBackOff",
  "CreateContainerConfigError",
  "ProgressDeadlineExceeded",
]);
/** Reasons worth a Warning that the cluster may resolve on its own: phase Pending. */
const waitingReasons = new Set([
  "SecretNotFound",
  "ConfigMapNotFound",
  "ConfigMapKeyNotFound",
  "ClaimNotFound",
  "Unschedulable",
  "ClaimPending",
]);

export function isWarningReason(reason: string): boolean {
  return failureReasons.has(reason) || waitingReasons.has(reason);
}

interface Verdict {
  phase: Phase;
  reason: string;
  message: string;
}

/** The status being worked out: conditions so far, and the first blocking problem found. */
interface Draft {
  conditions: Map<ConditionType, { status: "True" | "False" | "Unknown"; reason: string; message: string }>;
  verdict?: Verdict;
}

function set(p: Draft, type: ConditionType, ok: boolean | "Unknown", reason: string, message: string): void {
  p.conditions.set(type, { status: ok === "Unknown" ? "Unknown" : ok ? "True" : "False", reason, message });
}

/** The first blocking problem decides the phase; later steps are then Unknown. */
function decide(p: Draft, reason: string, message: string, phase?: Phase): void {
  if (p.verdict) return;
  const chosen: Phase = phase ?? (failureReasons.has(reason) ? "Failed" : "Pending");
  p.verdict = { phase: chosen, reason, message };
}

/** The condition that ended a Job (Complete or Failed), or undefined while it runs. */
export function jobEnd(job: V1Job): V1JobCondition | undefined {
  return job.status?.conditions?.find(
    (c) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
  );
}

/** Where a Job stands: finished (Complete, Failed), Active, or undefined when there is none. */
export function jobState(job: V1Job | undefined): "Complete" | "Failed" | "Active" | undefined {
  if (!job) return undefined;
  return (jobEnd(job)?.type as "Complete" | "Failed" | undefined) ?? "Active";
}

function newestFirst(pods: readonly V1Pod[]): V1Pod[] {
  const created = (p: V1Pod) => String(p.metadata?.creationTimestamp ?? "");
  return [...pods].sort((a, b) => (created(a) < created(b) ? 1 : -1));
}

function downloadStep(o: Observed, p: Draft, plan: ServingPlan): MLModelStatus["download"] {
  if (plan.source.type !== "download") {
    set(
      p,
      "StorageReady",
      true,
      plan.source.type === "pvc" ? "UserClaim" : "NotRequired",
      "no storage is created",
    );
    set(
      p,
      "ModelDownloaded",
      true,
      "NotRequired",
      "nothing to download: the model is mounted or read by the server",
    );
    return undefined;
  }
  const cache = plan.source.nodeCache;
  const claimPhase = o.storage?.status?.phase;
  if (cache)
    set(p, "StorageReady", true, "NodeCache", `no claim: the node cache keeps the model (key ${cache.key})`);
  else if (claimPhase === "Bound")
    set(p, "StorageReady", true, "Bound", `claim ${plan.source.claimName} is bound`);
  else if (claimPhase === "Lost") {
    set(p, "StorageReady", false, "ClaimLost", `claim ${plan.source.claimName} lost its volume`);
    decide(
      p,
      "ClaimLost",
      `claim ${plan.source.claimName} lost its volume; delete it to get a new one`,
      "Failed",
    );
  } else {
    // With WaitForFirstConsumer storage a claim binds only once the download pod exists, so a
    // pending claim does not stop the download: the scheduler reports if it cannot proceed.
    set(p, "StorageReady", false, "ClaimPending", `claim ${plan.source.claimName} is waiting for a volume`);
  }

  const job = o.job;
  const jobName = plan.source.jobName;
  if (!job) {
    set(p, "ModelDownloaded", false, "Downloading", `starting download Job ${jobName}`);
    decide(p, "Downloading", `starting download Job ${jobName} for ${plan.source.shownUri}`, "Downloading");
    return { job: jobName, jobState: "Pending", attempts: 0 };
  }
  // Pods that ended but that the Job controller has not counted yet (uncountedTerminatedPods):
  // without them a Job whose pod just succeeded reads as 0 attempts, nothing running, and
  // status would step back from Running to Pending before the Job says Complete.
  const uncounted = job.status?.uncountedTerminatedPods;
  const ended = (uncounted?.succeeded?.length ?? 0) + (uncounted?.failed?.length ?? 0);
  // Attempts are pods that started: a pod the Job counts as active may still wait for a node
  // or for its volume, and that is no attempt yet (nor a running download). The Job counts its
  // ready pods (the downloader has no readiness probe: ready once it runs); its pods are read
  // only while it has none (mlmodel/download-pods.ts).
  const running = Math.max(
    job.status?.ready ?? 0,
    o.jobPods.filter((pod) => pod.status?.phase === "Running" && !pod.metadata?.deletionTimestamp).length,
  );
  const attempts = (job.status?.failed ?? 0) + (job.status?.succeeded ?? 0) + ended + running;
  const end = jobEnd(job);
  if (end?.type === "Complete") {
    const where = cache ? `the node cache (key ${cache.key})` : plan.source.dest;
    set(p, "ModelDownloaded", true, "Downloaded", `${plan.source.shownUri} is in ${where}`);
    return { job: jobName, jobState: "Succeeded", attempts };
  }
  if (end?.type === "Failed") {
    // The downloader redacts its own message; an older or foreign image might not.
    const said = newestFirst(o.jobPods)
      .map((pod) => terminationMessage(pod, "download"))
      .find((m) => m !== undefined);
    const saidShown = said === undefined ? undefined : redactText(said);
    const deadline = plan.spec.model.downloadDeadlineSeconds;
    // Stopped by activeDeadlineSeconds: the pod's last words are only a progress line.
    const message =
      end.reason === "DeadlineExceeded"
        ? `download of ${plan.source.shownUri} did not finish within spec.model.downloadDeadlineSeconds (${deadline}s) and was stopped after ${attempts} attempt(s) (last: ${saidShown ?? "no message"}); raise spec.model.downloadDeadlineSeconds for a model that takes longer, or check the store`
        : `download of ${plan.source.shownUri} failed after ${attempts} attempt(s) (${end.reason ?? "Failed"}): ${saidShown ?? end.message ?? "no message from the downloader"}`;
    set(p, "ModelDownloaded", false, "DownloadFailed", message);
    decide(p, "DownloadFailed", `${message}. Fix the cause (URI, credentials) and the download is retried`);
    return { job: jobName, jobState: "Failed", attempts };
  }
  const problem = podProblem(o.jobPods);
  const volumeWait =
    !cache && (problem ? claimBinding(o, problem) !== undefined : o.storage?.status?.phase !== "Bound");
  if (problem && !volumeWait) {
    set(p, "ModelDownloaded", false, problem.reason, `download: ${problem.message}`);
    decide(p, problem.reason, `download: ${problem.message}`);
  } else {
    // Said the same from the Job's creation until its pod runs: the pod that waits for the
    // scheduler and the volume is no new step (and no status write).
    const message =
      running === 0 && volumeWait
        ? `Job ${jobName} waits for its volume (claim ${plan.source.claimName}) to download ${plan.source.shownUri}`
        : `Job ${jobName} is downloading ${plan.source.shownUri}`;
    set(p, "ModelDownloaded", false, "Downloading", message);
    decide(p, "Downloading", message, "Downloading");
  }
  return { job: jobName, jobState: running || ended ? "Running" : "Pending", attempts };
}

/**
 * When the download pod is unschedulable only because the model's new claim is not bound yet,
 * the ms left of its grace (defaults.claimBindingGraceSeconds from the claim's creation): the
 * normal wait for a volume, reported as Downloading, not as a problem. Also once the claim is
 * Bound: the pod keeps the scheduler's verdict until its next try, which may come seconds
 * later. After the grace, or for any other reason, undefined: the problem is reported (its
 * hint names the StorageClass).
 */
export function claimBinding(o: Observed, problem = podProblem(o.jobPods)): number | undefined {
  if (
    problem?.reason !== "Unschedulable" ||
    !/unbound immediate PersistentVolumeClaims/.test(problem.message)
  )
    return undefined;
  const claim = o.storage;
  if (!claim || claim.status?.phase === "Lost") return undefined;
  const created = Date.parse(String(claim.metadata?.creationTimestamp ?? ""));
  if (Number.isNaN(created)) return undefined;
  const left = created + defaults.claimBindingGraceSeconds * 1000 - Date.parse(o.now);
  return left > 0 ? left : undefined;
}

/** The serving revision a Deployment's pod template runs (its revision label). */
export function deploymentRevision(d: V1Deployment): string | undefined {
  return d.spec?.template?.metadata?.labels?.[labels.revision];
}

/**
 * The current revision's replicas and ready replicas: from its pods when they were read, else
 * from the Deployment, whose counts are then exact (see Observed.pods): all of its pods run
 * its template, which is the current revision or not.
 */
function currentReplicas(
  o: Observed,
  d: V1Deployment,
): { updated: number; ready: number; problem?: PodProblem } {
  if (o.pods) {
    const current = currentRevisionPods(o.pods, o.revision);
    const problem = asLoadFailure(o, current);
    return {
      updated: current.length,
      ready: current.filter(isPodReady).length,
      ...(problem ? { problem } : {}),
    };
  }
  if (deploymentRevision(d) !== o.revision) return { updated: 0, ready: 0 };
  return { updated: d.status?.updatedReplicas ?? 0, ready: d.status?.readyReplicas ?? 0 };
}

/** The pods of `revision` that the model's own Deployment runs (a canary's are judged apart). */
export function currentRevisionPods(pods: readonly V1Pod[], revision: string | undefined): readonly V1Pod[] {
  return pods.filter(
    (pod) => pod.metadata?.labels?.[labels.revision] === revision && !pod.metadata?.labels?.[trackLabel],
  );
}

/**
 * The crash that status tells as a load failure: a crash loop of a revision that never served
 * (not the last ready one, no pod of it ready), whose runtime ended itself (pods.ts,
 * endedItself). Once the revision has served, a crash is a crash: the model loaded. Undefined
 * for any other problem, or none. The crash-logs stage reads this crash's log, and only this one's.
 */
export function loadFailureCrash(
  o: Pick<Observed, "model" | "revision">,
  current: readonly V1Pod[],
  problem = podProblem(current),
): CrashedContainer | undefined {
  const crash = problem?.crash;
  if (problem?.reason !== "CrashLoopBackOff" || !crash || !endedItself(crash)) return undefined;
  if (o.revision !== undefined && o.model.status?.revision?.lastReady === o.revision) return undefined;
  return current.some(isPodReady) ? undefined : crash;
}

function asLoadFailure(o: Observed, current: readonly V1Pod[]): PodProblem | undefined {
  const problem = podProblem(current);
  const crash = loadFailureCrash(o, current, problem);
  return crash ? loadFailure(crash, o.crashWords?.get(crash.key)) : problem;
}

/** Returns how many serving replicas run the current revision (the Deployment's own: a canary's are judged apart). */
function servingStep(o: Observed, p: Draft): number {
  const d = o.deployment;
  if (!d) {
    set(p, "ServingReady", false, "Deploying", "creating the serving Deployment");
    decide(p, "Deploying", "creating the serving Deployment", "Deploying");
    return 0;
  }
  const desired = d.spec?.replicas ?? 1;
  const { updated, ready: readyCurrent, problem } = currentReplicas(o, d);
  const progressing = d.status?.conditions?.find((c) => c.type === "Progressing");
  const name = d.metadata?.name;
  // A load failure names the cause the deadline only follows from.
  if (
    progressing?.status === "False" &&
    progressing.reason === "ProgressDeadlineExceeded" &&
    problem?.reason !== "ModelLoadFailed"
  ) {
    const message = `Deployment ${name} made no progress within ${d.spec?.progressDeadlineSeconds}s${problem ? `: ${problem.message}` : ""}`;
    set(p, "ServingReady", false, "ProgressDeadlineExceeded", message);
    decide(p, "ProgressDeadlineExceeded", message);
    return updated;
  }
  if (problem) {
    set(p, "ServingReady", false, problem.reason, problem.message);
    decide(p, problem.reason, problem.message);
    return updated;
  }
  if (desired === 0) {
    // Deliberate, not a fault: the Service (and status.url) stay, so scaling up needs no new URL.
    const message =
      "scaled to zero (spec.replicas or spec.autoscaling.minReplicas is 0): no replica serves; the Service and URL are kept; scale up with kubectl scale mlmodel NAME --replicas=N";
    set(p, "ServingReady", false, "ScaledToZero", message);
    decide(p, "ScaledToZero", message, "Pending");
    return updated;
  }
  // Rollout complete, as `kubectl rollout status` judges it, and confirmed by the pods.
  const s = d.status ?? {};
  const rolledOut =
    (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0) &&
    (s.updatedReplicas ?? 0) >= desired &&
    (s.replicas ?? 0) === (s.updatedReplicas ?? 0) &&
    (s.availableReplicas ?? 0) >= desired;
  if (rolledOut && readyCurrent >= desired) {
    set(p, "ServingReady", true, "ReplicasReady", `${readyCurrent} of ${desired} replicas ready`);
  } else {
    const message =
      readyCurrent >= desired
        ? `${readyCurrent} of ${desired} replicas ready; waiting for Deployment ${name} to report its rollout complete`
        : `${readyCurrent} of ${desired} replicas of the current revision ready`;
    set(p, "ServingReady", false, "ReplicasNotReady", message);
    decide(p, "ReplicasNotReady", message, "Deploying");
  }
  return updated;
}

/**
 * Replicas and ready replicas of every revision: the pods', or the Deployment's count of them
 * (see Observed.pods). Counted as the Deployment counts them, so that the two never disagree:
 * pods that are not being deleted and have not ended (an evicted pod stays, Failed, until it is
 * collected).
 */
function allReplicas(o: Observed): { replicas: number; ready: number } {
  if (o.pods) {
    const active = o.pods.filter(
      (pod) =>
        !pod.metadata?.deletionTimestamp &&
        pod.status?.phase !== "Failed" &&
        pod.status?.phase !== "Succeeded",
    );
    return { replicas: active.length, ready: active.filter(isPodReady).length };
  }
  return { replicas: o.deployment?.status?.replicas ?? 0, ready: o.deployment?.status?.readyReplicas ?? 0 };
}

function urls(o: Observed): Pick<MLModelStatus, "url" | "restURL" | "grpcURL"> {
  const plan = o.plan;
  if (!plan || !o.service) return {};
  const host = `${o.service.metadata?.name}.${plan.namespace}.svc`;
  const restURL = plan.restPort ? `http://${host}:${plan.restPort}` : undefined;
  const grpcURL = plan.grpcPort ? `${host}:${plan.grpcPort}` : undefined;
  return { url: restURL ?? grpcURL, ...(restURL ? { restURL } : {}), ...(grpcURL ? { grpcURL } : {}) };
}

/** Keeps lastTransitionTime when a condition's status did not change. */
function withTransitions(previous: readonly Condition[] | undefined, p: Draft, o: Observed): Condition[] {
  const generation = o.model.metadata.generation ?? 0;
  const order: ConditionType[] = [
    "Ready",
    "RuntimeResolved",
    "DependenciesReady",
    "StorageReady",
    "ModelDownloaded",
    "ServingReady",
  ];
  const out: Condition[] = [];
  for (const type of order) {
    const c = p.conditions.get(type);
    if (!c) continue;
    const before = previous?.find((x) => x.type === type);
    out.push({
      type,
      status: c.status,
      reason: c.reason,
      message: c.message,
      observedGeneration: generation,
      lastTransitionTime: before && before.status === c.status ? before.lastTransitionTime : o.now,
    });
  }
  return out;
}

/** Operator-owned status (status.download's progress fields belong to the downloader). */
export function computeStatus(o: Observed): MLModelStatus {
  const previous = o.model.status;
  const p: Draft = { conditions: new Map() };
  let download: MLModelStatus["download"];
  let updated = 0;

  if (o.planFailure) {
    set(p, o.planFailure.condition ?? "RuntimeResolved", false, o.planFailure.reason, o.planFailure.message);
    decide(p, o.planFailure.reason, o.planFailure.message, "Failed");
  } else if (o.plan) {
    set(p, "RuntimeResolved", true, "Resolved", `served by ${o.plan.runtime.ref}`);
    const missing = o.missing[0];
    if (missing) {
      set(p, "DependenciesReady", false, missing.reason, o.missing.map((m) => m.message).join("; "));
      decide(p, missing.reason, `${missing.message}; waiting for it to appear`, "Pending");
    } else {
      set(p, "DependenciesReady", true, "Found", "referenced Secrets, ConfigMaps and claims exist");
      download = downloadStep(o, p, o.downloadPlan ?? o.plan);
      if (!p.verdict) updated = servingStep(o, p);
    }
  }

  const { replicas, ready: readyPods } = allReplicas(o);
  const deletion = o.model.metadata.deletionTimestamp;
  let verdict: Verdict = p.verdict ?? {
    phase: "Ready",
    reason: "Serving",
    message: `${readyPods} replica(s) ready${o.service ? ` at ${urls(o).url}` : ""}`,
  };
  if (deletion)
    verdict = { phase: "Terminating", reason: "Deleting", message: "deleting the model's children" };
  const ready = verdict.phase === "Ready";
  set(p, "Ready", ready, verdict.reason, verdict.message);

  const revision = o.revision;
  // Entries an older operator wrote may hold a URI with credentials in it.
  const history = (previous?.revision?.history ?? []).map((h) =>
    h.modelURI ? { ...h, modelURI: redactUri(h.modelURI) } : h,
  );
  if (ready && revision && history[0]?.revision !== revision) {
    history.unshift({
      revision,
      ...(o.plan?.spec.model.uri ? { modelURI: redactUri(o.plan.spec.model.uri) } : {}),
      ...(o.plan?.spec.model.version ? { modelVersion: o.plan.spec.model.version } : {}),
      ...(o.plan ? { image: o.plan.image } : {}),
      readyAt: o.now,
    });
  }
  const lastReady = ready ? revision : previous?.revision?.lastReady;

  return {
    phase: verdict.phase,
    reason: verdict.reason,
    message: verdict.message,
    conditions: withTransitions(previous?.conditions, p, o),
    observedGeneration: o.model.metadata.generation ?? 0,
    replicas,
    readyReplicas: readyPods,
    updatedReplicas: updated,
    selector: selectorString(servingSelector(o.model.metadata.name!)),
    ...(o.plan ? { runtime: o.plan.runtime.ref } : {}),
    ...(o.plan?.spec.model.version ? { modelVersion: o.plan.spec.model.version } : {}),
    ...urls(o),
    ...(download ? { download } : {}),
    ...storageStatus(o),
    ...(revision
      ? {
          revision: { current: revision, ...(lastReady ? { lastReady } : {}), history: history.slice(0, 10) },
        }
      : {}),
  };
}

/**
 * status.storageMode and status.cache of a downloaded model, when the operator has a node
 * cache (without one nothing changes: every model uses a claim).
 */
function storageStatus(o: Observed): Pick<MLModelStatus, "storageMode" | "cache"> {
  const source = o.plan?.source;
  if (source?.type !== "download") return {};
  if (source.nodeCache) {
    const { key, url } = source.nodeCache;
    const states = o.nodeCache?.states;
    // Without the agents' states no node is listed: none would say no node holds it.
    return {
      storageMode: "NodeCache",
      cache: states ? nodeCacheStatus(key, url, states, Date.parse(o.now)) : { key, url },
    };
  }
  return o.nodeCache ? { storageMode: "Claim" } : {};
}

/**
 * Status fields the operator owns and applies. The downloader owns status.download's progress
 * fields: they are left out, so comparing never sees the downloader's changes as the
 * operator's, and applying never takes their ownership.
 */
export function operatorOwned(status: MLModelStatus | undefined): unknown {
  if (!status) return {};
  const { download, ...rest } = status;
  const { job, jobState: js, attempts } = download ?? {};
  const mine = Object.fromEntries(
    Object.entries({ job, jobState: js, attempts }).filter(([, v]) => v !== undefined),
  );
  // Progress alone (before the operator wrote its fields, or after) is no operator status.
  return Object.keys(mine).length ? { ...rest, download: mine } : rest;
}

/**
 * A transition a person should hear about, as an Event: every change to a problem (a Warning),
 * and the change that ends one (Normal: what it became). The steps of a healthy rollout
 * (Downloading, Deploying, Serving) get none: status says each of them with its time
 * (conditions' lastTransitionTime, status.revision.history), and an Event per step would cost
 * every model one to three API writes that say nothing more.
 */
export function transitionEvent(
  before: MLModelStatus | undefined,
  after: MLModelStatus,
): { type: "Normal" | "Warning"; reason: string; message: string } | undefined {
  if (before?.phase === after.phase && before?.reason === after.reason) return undefined;
  const reason = after.reason ?? after.phase ?? "Unknown";
  const type = isWarningReason(reason) ? "Warning" : "Normal";
  const recovered = before?.reason !== undefined && isWarningReason(before.reason);
  if (type === "Normal" && !recovered) return undefined;
  return { type, reason, message: `${after.phase}: ${after.message ?? ""}` };
}
