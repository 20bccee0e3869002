/**
 * Revision history: every distinct serving pod template (the hash the serving pods carry as
 * their revision label) is recorded as a ControllerRevision owned by the MLModel, holding the
 * spec that produced it, so a revision can be served again (rollback) without the user's spec.
 * Numbers grow like a Deployment's: serving an old revision again gives it the next number.
 * Scaling (replicas, autoscaling) is not part of a revision: scaling never rolls pods.
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { MLModel, MLModelSpec, MLModelStatus } from "../api/mlmodel.ts";
import { redactUri, uriHasSecrets } from "../downloader/redact.ts";
import { cacheKey } from "../nodecache/contract.ts";
import type { OwnerReference } from "../runtime/index.ts";
import { childLabels, childNames, labels } from "./names.ts";
import { contentHash, type RecordedSource } from "./plan.ts";

export const defaultRevisionHistoryLimit = 10;

/** The part of a spec a revision restores: everything but scaling. */
export function servingSpec(spec: MLModelSpec): MLModelSpec {
  const { replicas: _r, autoscaling: _a, ...rest } = spec;
  return rest;
}

/** The user's scaling with a revision's serving spec: what a rollback writes back. */
export function specWithScaling(revisionSpec: MLModelSpec, current: MLModelSpec): MLModelSpec {
  return {
    ...servingSpec(revisionSpec),
    ...(current.replicas !== undefined ? { replicas: current.replicas } : {}),
    ...(current.autoscaling ? { autoscaling: current.autoscaling } : {}),
  };
}

/**
 * A recorded revision served again, today: its serving spec with the user's current scaling and
 * rollout block (neither is part of a revision, so neither changes which revision it is). What
 * `mlmodel rollback` writes and what a canary's stable Deployment serves.
 */
export function specServedAgain(revisionSpec: MLModelSpec, current: MLModelSpec): MLModelSpec {
  const { rollout: _recorded, ...rest } = specWithScaling(revisionSpec, current);
  return { ...rest, ...(current.rollout ? { rollout: current.rollout } : {}) };
}

export function revisionName(model: string, hash: string): string {
  return `${model}-${hash}`;
}

export function revisionHash(rev: V1ControllerRevision): string | undefined {
  return rev.metadata?.labels?.[labels.revision];
}

/** What a ControllerRevision's data holds. */
interface RevisionData {
  /** The serving spec; spec.model.uri redacted when it has credentials in it (then `source`). */
  spec: MLModelSpec;
  source?: RecordedSource;
}

export function revisionSpec(rev: V1ControllerRevision): MLModelSpec | undefined {
  return (rev.data as Partial<RevisionData> | undefined)?.spec;
}

/** Where a revision recorded with a redacted URI keeps its content hash and exact URI. */
export function recordedSource(rev: V1ControllerRevision): RecordedSource | undefined {
  return (rev.data as Partial<RevisionData> | undefined)?.source;
}

/**
 * The data of a new revision of `spec`. A ControllerRevision is readable by anyone who may
 * read the namespace's apps (the `view` role), so a URI with credentials in it (a pre-signed
 * URL, a SAS, a token) is recorded redacted; its exact form goes into the revision's URI
 * Secret (childNames.uriSecret), and its content hash beside the spec, so serving the revision
 * again reuses the same download.
 */
export function revisionData(spec: MLModelSpec, model: string, hash: string): RevisionData {
  const serving = servingSpec(spec);
  const uri = spec.model.uri;
  if (!uri || uri.startsWith("pvc://") || !uriHasSecrets(uri)) return { spec: serving };
  return {
    spec: { ...serving, model: { ...serving.model, uri: redactUri(uri) } },
    source: {
      content: contentHash(spec),
      uriSecret: childNames.uriSecret(model, hash),
      // A rollback to it finds its version in the node cache under the same key.
      cacheKey: cacheKey(uri, spec.model.sha256),
    },
  };
}

export function newestFirst(revisions: readonly V1ControllerRevision[]): V1ControllerRevision[] {
  return [...revisions].sort((a, b) => b.revision - a.revision);
}

/**
 * The ControllerRevision to apply for the serving revision `hash`, or undefined when the
 * existing one is already the newest. Data is immutable, so an existing revision keeps its
 * recorded spec and only its number moves.
 */
export function desiredRevision(
  model: MLModel,
  hash: string,
  owner: OwnerReference,
  existing: readonly V1ControllerRevision[],
): V1ControllerRevision | undefined {
  const newest = newestFirst(existing)[0];
  const mine = existing.find((r) => revisionHash(r) === hash);
  if (mine && mine === newest) return undefined;
  const name = model.metadata.name!;
  return {
    apiVersion: "apps/v1",
    kind: "ControllerRevision",
    metadata: {
      name: revisionName(name, hash),
      namespace: model.metadata.namespace,
      labels: { ...childLabels(name, "revision"), [labels.revision]: hash },
      ownerReferences: [owner],
    },
    data: mine?.data ?? revisionData(model.spec, name, hash),
    revision: (newest?.revision ?? 0) + 1,
  };
}

/** Revisions beyond the history limit, oldest first; never one in `keep` (served, last ready). */
export function revisionsToPrune(
  revisions: readonly V1ControllerRevision[],
  limit: number,
  keep: ReadonlySet<string | undefined>,
): V1ControllerRevision[] {
  return newestFirst(revisions)
    .slice(limit)
    .filter((r) => !keep.has(revisionHash(r)));
}

/** Adds revision numbers and what is rolling out to the status's revision block. */
export function withRevisionNumbers(
  status: MLModelStatus,
  revisions: readonly V1ControllerRevision[],
): MLModelStatus {
  const r = status.revision;
  if (!r?.current) return status;
  const numberOf = (hash: string | undefined) => revisions.find((x) => revisionHash(x) === hash)?.revision;
  const currentNumber = numberOf(r.current);
  const lastReadyNumber = numberOf(r.lastReady);
  return {
    ...status,
    revision: {
      ...r,
      ...(currentNumber !== undefined ? { currentNumber } : {}),
      ...(lastReadyNumber !== undefined ? { lastReadyNumber } : {}),
      // The current revision is what rolls out until it is ready.
      ...(status.phase !== "Ready" ? { rollingOut: r.current } : {}),
    },
  };
}

/** One line of `mlmodel history`. */
export interface HistoryEntry {
  number: number;
  hash: string;
  marks: string[];
  modelURI?: string;
  modelVersion?: string;
  image?: string;
}

export function historyEntries(
  revisions: readonly V1ControllerRevision[],
  status: MLModelStatus | undefined,
): HistoryEntry[] {
  return newestFirst(revisions).map((r) => {
    const hash = revisionHash(r) ?? "";
    const spec = revisionSpec(r);
    return {
      number: r.revision,
      hash,
      marks: status?.revision?.serving?.length ? canaryMarks(hash, status) : plainMarks(hash, status),
      // Revisions an older operator recorded hold the exact URI.
      ...(spec?.model.uri ? { modelURI: redactUri(spec.model.uri) } : {}),
      ...(spec?.model.version ? { modelVersion: spec.model.version } : {}),
      ...(spec?.image ? { image: spec.image } : {}),
    };
  });
}

function plainMarks(hash: string, status: MLModelStatus | undefined): string[] {
  return [
    hash === status?.revision?.current && (status?.phase === "Ready" ? "serving" : "rolling out"),
    hash === status?.revision?.lastReady && hash !== status?.revision?.current && "last ready",
  ].filter((m): m is string => typeof m === "string");
}

/**
 * Marks of a model with a canary (status.revision.serving says what serves): "stable 80%" and
 * "canary 20%" while one runs (with "waiting", "promoting" or "aborting" when it is), "serving"
 * outside one, and how the last canary ended on its revision ("aborted").
 */
function canaryMarks(hash: string, status: MLModelStatus): string[] {
  const canary = status.canary;
  const running = ["Waiting", "Progressing", "Paused", "Promoting", "Aborting"].includes(canary?.phase ?? "");
  const marks = (status.revision?.serving ?? [])
    .filter((s) => s.revision === hash)
    .map((s) => {
      if (!running) return "serving";
      return `${s.role === "Canary" ? "canary" : "stable"} ${s.trafficPercent ?? 0}%`;
    });
  if (canary?.revision === hash) {
    if (running && ["Waiting", "Promoting", "Aborting"].includes(canary.phase!))
      marks.push(`${marks.length ? "" : "canary "}${canary.phase!.toLowerCase()}`);
    if (canary.phase === "Aborted") marks.push("aborted");
  }
  if (marks.length === 0 && hash === status.revision?.lastReady) marks.push("last ready");
  return marks;
}

/**
 * The revision `mlmodel rollback` serves: the one numbered `to`, else the last ready one when
 * the current revision is not it, else the newest before the current one.
 */
export function rollbackTarget(
  revisions: readonly V1ControllerRevision[],
  status: MLModelStatus | undefined,
  to?: number,
): V1ControllerRevision | { error: string } {
  const ordered = newestFirst(revisions);
  if (to !== undefined) {
    return (
      ordered.find((r) => r.revision === to) ?? {
        error: `no revision ${to}; kept: ${ordered.map((r) => r.revision).join(", ") || "none"}`,
      }
    );
  }
  const current = status?.revision?.current;
  const lastReady = status?.revision?.lastReady;
  const byHash = (h: string | undefined) => ordered.find((r) => revisionHash(r) === h);
  if (lastReady && lastReady !== current && byHash(lastReady)) return byHash(lastReady)!;
  const currentNumber = byHash(current)?.revision ?? Number.POSITIVE_INFINITY;
  return ordered.find((r) => r.revision < currentNumber) ?? { error: "no earlier revision to roll back to" };
}
