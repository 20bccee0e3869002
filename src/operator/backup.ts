/**
 * Backup and restore of models, as pure functions: the objects read from a cluster in, one
 * multi-document YAML out (buildBackup); that text in, the objects to write out (parseBackup,
 * then modelToRestore, revisionToRestore, statusMemory). docs/backup.md says why each field is
 * kept or dropped.
 *
 * The file holds no credential: a model URI with credentials in it is written redacted, and
 * the model names the URI Secret that holds its exact form (a Secret is never written to the
 * file); restore reads it back from that Secret, which must exist first.
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { parseAllDocuments, stringify } from "yaml";
import type { MLModel, MLModelStatus } from "../api/mlmodel.ts";
import { redactText, redactUri, uriHasSecrets } from "../downloader/redact.ts";
import type { KubeObject, OwnerReference } from "../runtime/index.ts";
import { specReferences } from "./mlmodel/caches.ts";
import { canonicalJson, labels } from "./names.ts";
import { contentHash } from "./plan.ts";
import { newestFirst, recordedSource, revisionHash, revisionSpec } from "./revisions.ts";

/** The first line of every backup: how restore tells a backup from any other YAML. */
export const backupHeader = "# mlmodel backup, format 1";

export const backupAnnotations = {
  /** On a backed-up MLModel: the Secret (key `uri`) holding the exact spec.model.uri the file has redacted. */
  uriSecret: "backup.mlmodel.dev/uri-secret",
} as const;

const group = "serving.mlmodel.dev";

/** What a backup holds, kind by kind, in the order restore writes them. */
export const backedUpKinds = [
  { apiVersion: "v1", kind: "Namespace", namespaced: false },
  { apiVersion: `${group}/v1alpha1`, kind: "ClusterServingRuntime", namespaced: false },
  { apiVersion: `${group}/v1alpha1`, kind: "ServingRuntime", namespaced: true },
  { apiVersion: `${group}/v1alpha1`, kind: "MLModel", namespaced: true },
  { apiVersion: "apps/v1", kind: "ControllerRevision", namespaced: true },
] as const;

/** What backup read from the cluster: revisions are the models' own (controlled by their uid). */
export interface ClusterObjects {
  namespaces: readonly KubeObject[];
  clusterRuntimes: readonly KubeObject[];
  runtimes: readonly KubeObject[];
  models: readonly MLModel[];
  revisions: readonly V1ControllerRevision[];
}

/** An object a restored model needs that a backup never holds (a Secret, or the user's own). */
export interface Requirement {
  kind: "Secret" | "ConfigMap" | "PersistentVolumeClaim";
  namespace: string;
  name: string;
  /** The model that needs it, and for what. */
  model: string;
  why: string;
  /** Needed only to roll back to an older revision, not to serve the restored one. */
  rollbackOnly: boolean;
}

export interface Backup {
  text: string;
  contents: BackupContents;
  requirements: Requirement[];
  /** Values the backup redacted besides a model URI (an annotation, an env value): restore writes them redacted. */
  warnings: string[];
}

export interface ModelBackup {
  /** As in the file: no server-set fields, a redacted URI, only the status the operator cannot recompute. */
  model: MLModel;
  /** Its revisions, newest first, with no owner (restore makes the restored model their owner). */
  revisions: V1ControllerRevision[];
}

export interface BackupContents {
  namespaces: KubeObject[];
  clusterRuntimes: KubeObject[];
  runtimes: KubeObject[];
  models: ModelBackup[];
}

/** A file restore cannot use, or a model backup cannot write without a credential. */
export class BackupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "BackupError";
  }
}

// Fields the API server sets, or that name this cluster's objects by uid: a restore gets new ones.
const serverSetMetadata = [
  "uid",
  "resourceVersion",
  "generation",
  "creationTimestamp",
  "deletionTimestamp",
  "deletionGracePeriodSeconds",
  "managedFields",
  "ownerReferences",
  "finalizers",
  "selfLink",
  "generateName",
];
// kubectl's client-side apply state: a copy of the spec as applied, credentials and all.
const droppedAnnotations = ["kubectl.kubernetes.io/last-applied-configuration"];
// Set by the API server on every namespace.
const droppedNamespaceLabels = ["kubernetes.io/metadata.name"];

/** An object as another cluster can take it: no server-set metadata, no status. */
export function portable<T extends KubeObject>(obj: T): T {
  const { status: _status, metadata, ...rest } = obj as T & { status?: unknown };
  const kept: Record<string, unknown> = { ...metadata };
  for (const field of serverSetMetadata) delete kept[field];
  const annotations = without(metadata.annotations, droppedAnnotations);
  const labelsKept = without(metadata.labels, obj.kind === "Namespace" ? droppedNamespaceLabels : []);
  if (annotations) kept.annotations = annotations;
  else delete kept.annotations;
  if (labelsKept) kept.labels = labelsKept;
  else delete kept.labels;
  return { ...rest, metadata: kept } as T;
}

function without(map: Record<string, string> | undefined, keys: readonly string[]) {
  if (!map) return undefined;
  const kept = Object.fromEntries(Object.entries(map).filter(([k]) => !keys.includes(k)));
  return Object.keys(kept).length ? kept : undefined;
}

/** A namespace as a backup holds it: its name, labels and annotations (Pod Security's level). */
function portableNamespace(ns: KubeObject): KubeObject {
  const { spec: _spec, ...rest } = portable(ns) as KubeObject & { spec?: unknown };
  return rest;
}

/**
 * The part of a model's status the operator cannot recompute, being memory of the past: the
 * last ready revision (what automatic rollback and a canary's stable side serve), the failed
 * revision it rolled back from, and the history of when each revision became ready.
 */
export function statusMemory(status: MLModelStatus | undefined): MLModelStatus | undefined {
  const r = status?.revision;
  if (!r) return undefined;
  const revision = {
    ...(r.lastReady ? { lastReady: r.lastReady } : {}),
    ...(r.failed ? { failed: r.failed } : {}),
    ...(r.history?.length ? { history: r.history } : {}),
  };
  return Object.keys(revision).length ? { revision } : undefined;
}

const modelKey = (m: { metadata: { namespace?: string; name?: string } }) =>
  `${m.metadata.namespace}/${m.metadata.name}`;

/** Revisions by the uid of their controller: a model's history is what it controls. */
function revisionsByController(
  revisions: readonly V1ControllerRevision[],
): Map<string, V1ControllerRevision[]> {
  const byUid = new Map<string, V1ControllerRevision[]>();
  for (const r of revisions) {
    const uid = r.metadata?.ownerReferences?.find((o) => o.controller)?.uid;
    if (!uid) continue;
    const mine = byUid.get(uid);
    if (mine) mine.push(r);
    else byUid.set(uid, [r]);
  }
  return byUid;
}

/**
 * The backup of the objects read. Throws a BackupError naming the model when its URI has
 * credentials in it that no revision keeps in a Secret yet (the file would have to hold them).
 */
export function buildBackup(objects: ClusterObjects, takenAt: string, scope: string): Backup {
  const warnings: string[] = [];
  const controlled = revisionsByController(objects.revisions);
  const models = [...objects.models]
    .sort((a, b) => modelKey(a).localeCompare(modelKey(b)))
    .map((model) => backupOfModel(model, newestFirst(controlled.get(model.metadata.uid!) ?? []), warnings));
  const byName = (a: KubeObject, b: KubeObject) => modelKey(a).localeCompare(modelKey(b));
  const contents: BackupContents = {
    namespaces: [...objects.namespaces].sort(byName).map(portableNamespace),
    clusterRuntimes: [...objects.clusterRuntimes].sort(byName).map((o) => scrubbed(portable(o), warnings)),
    runtimes: [...objects.runtimes].sort(byName).map((o) => scrubbed(portable(o), warnings)),
    models,
  };
  const requirements = requirementsOf(contents);
  return { text: serializeBackup(contents, requirements, takenAt, scope), contents, requirements, warnings };
}

function backupOfModel(live: MLModel, revisions: V1ControllerRevision[], warnings: string[]): ModelBackup {
  const model = portable(live);
  const uri = model.spec.model?.uri;
  let annotations = model.metadata.annotations;
  let spec = model.spec;
  if (uri && !uri.startsWith("pvc://") && uriHasSecrets(uri)) {
    const content = contentHash(model.spec);
    const keeper = revisions.find((r) => recordedSource(r)?.content === content);
    if (!keeper) {
      throw new BackupError(
        `MLModel ${modelKey(live)}: spec.model.uri has credentials in it and no revision keeps it in a Secret yet (the operator records one when it reconciles the spec); run the backup again once \`mlmodel history ${live.metadata.name} -n ${live.metadata.namespace}\` lists it`,
      );
    }
    spec = { ...spec, model: { ...spec.model, uri: redactUri(uri) } };
    annotations = { ...annotations, [backupAnnotations.uriSecret]: recordedSource(keeper)!.uriSecret };
  }
  const memory = statusMemory(live.status);
  const scrubbedModel = scrubbed(
    {
      ...model,
      metadata: { ...model.metadata, ...(annotations ? { annotations } : {}) },
      spec,
      ...(memory ? { status: memory } : {}),
    } as MLModel,
    warnings,
  );
  return {
    model: scrubbedModel,
    revisions: revisions.map((r) => scrubbed(portableRevision(r), warnings)),
  };
}

/** A revision without its owner (the model's uid changes) and without server-set fields. */
function portableRevision(rev: V1ControllerRevision): V1ControllerRevision {
  const obj = portable(rev as unknown as KubeObject) as unknown as V1ControllerRevision;
  return { apiVersion: "apps/v1", kind: "ControllerRevision", ...obj };
}

/**
 * The object with every string that looks like a credential (a URI's query values, a
 * `token=` parameter) redacted, and a warning for each one: the model URI was handled before,
 * so what is left is in an annotation, an env value or an older operator's revision.
 */
function scrubbed<T>(obj: T, warnings: string[]): T {
  const name = (() => {
    const o = obj as unknown as KubeObject;
    return `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ""}${o.metadata.name}`;
  })();
  const walk = (value: unknown, path: string): unknown => {
    if (typeof value === "string") {
      const clean = redactText(value);
      if (clean !== value) warnings.push(`${name}: ${path} looked like a credential and is written redacted`);
      return clean;
    }
    if (Array.isArray(value)) return value.map((v, i) => walk(v, `${path}[${i}]`));
    if (value && typeof value === "object")
      return Object.fromEntries(
        Object.entries(value).map(([k, v]) => [k, walk(v, path ? `${path}.${k}` : k)]),
      );
    return value;
  };
  return walk(obj, "") as T;
}

/** Every object the restored models need that the backup does not hold, by name. */
export function requirementsOf(contents: BackupContents): Requirement[] {
  const out = new Map<string, Requirement>();
  const add = (r: Requirement) => {
    const key = `${r.kind}/${r.namespace}/${r.name}`;
    const had = out.get(key);
    // Needed to serve beats needed for a rollback.
    if (!had || (had.rollbackOnly && !r.rollbackOnly)) out.set(key, r);
  };
  for (const { model, revisions } of contents.models) {
    const ns = model.metadata.namespace!;
    const name = model.metadata.name!;
    for (const ref of specReferences(ns, model.spec)) {
      add({
        kind: ref.kind.kind as Requirement["kind"],
        namespace: ns,
        name: ref.name,
        model: name,
        why: "spec",
        rollbackOnly: false,
      });
    }
    const uriSecret = model.metadata.annotations?.[backupAnnotations.uriSecret];
    if (uriSecret) {
      add({
        kind: "Secret",
        namespace: ns,
        name: uriSecret,
        model: name,
        why: "the exact spec.model.uri",
        rollbackOnly: false,
      });
    }
    for (const rev of revisions) {
      const why = `revision ${rev.revision}`;
      for (const ref of specReferences(ns, revisionSpec(rev))) {
        add({
          kind: ref.kind.kind as Requirement["kind"],
          namespace: ns,
          name: ref.name,
          model: name,
          why,
          rollbackOnly: true,
        });
      }
      const source = recordedSource(rev);
      if (source) {
        add({
          kind: "Secret",
          namespace: ns,
          name: source.uriSecret,
          model: name,
          why: `${why}'s exact model URI`,
          rollbackOnly: true,
        });
      }
    }
  }
  return [...out.values()].sort((a, b) =>
    `${a.namespace}/${a.kind}/${a.name}`.localeCompare(`${b.namespace}/${b.kind}/${b.name}`),
  );
}

function serializeBackup(
  contents: BackupContents,
  requirements: readonly Requirement[],
  takenAt: string,
  scope: string,
): string {
  const revisions = contents.models.reduce((n, m) => n + m.revisions.length, 0);
  const header = [
    backupHeader,
    `# taken ${takenAt} from ${scope}: ${contents.models.length} MLModel(s), ${revisions} revision(s), ${contents.runtimes.length} ServingRuntime(s), ${contents.clusterRuntimes.length} ClusterServingRuntime(s)`,
    "# Restore with `mlmodel restore FILE` (docs/backup.md). No Secret is in this file; these must exist first:",
    ...(requirements.length
      ? requirements.map(
          (r) =>
            `#   ${r.kind} ${r.namespace}/${r.name}: ${r.why} of MLModel ${r.model}${r.rollbackOnly ? " (only to roll back to it)" : ""}`,
        )
      : ["#   (none)"]),
  ];
  const docs: unknown[] = [
    ...contents.namespaces,
    ...contents.clusterRuntimes,
    ...contents.runtimes,
    // A model's revisions before it: `kubectl apply -f` then creates them before the operator,
    // seeing the model, records the spec's revision under the same name (kubectl's create of
    // it would fail with AlreadyExists).
    ...contents.models.flatMap((m) => [...m.revisions, m.model]),
  ];
  return `${header.join("\n")}\n${docs.map((d) => `---\n${stringify(d, { lineWidth: 0 })}`).join("")}`;
}

/** A backup read back: every document checked, each error naming the document and the field. */
export function parseBackup(text: string, source: string): BackupContents {
  if (!text.startsWith(backupHeader)) {
    const first = JSON.stringify(text.split("\n", 1)[0]!.slice(0, 60));
    throw new BackupError(
      `${source} is not an mlmodel backup: its first line is ${first}, a backup's is "${backupHeader}" (write one with \`mlmodel backup -o FILE\`)`,
    );
  }
  const contents: BackupContents = { namespaces: [], clusterRuntimes: [], runtimes: [], models: [] };
  const models = new Map<string, ModelBackup>();
  const revisions: { doc: number; rev: V1ControllerRevision }[] = [];
  const seen = new Set<string>();
  parseAllDocuments(text).forEach((parsed, i) => {
    const doc = i + 1;
    if (parsed.errors.length) {
      throw new BackupError(`${source}, document ${doc}: not valid YAML: ${parsed.errors[0]!.message}`);
    }
    const value = parsed.toJS() as unknown;
    if (value === null || value === undefined) return;
    const obj = checkedObject(value, `${source}, document ${doc}`);
    const id = `${obj.kind} ${obj.metadata.namespace ? `${obj.metadata.namespace}/` : ""}${obj.metadata.name}`;
    if (seen.has(id)) throw new BackupError(`${source}, document ${doc}: ${id} appears twice`);
    seen.add(id);
    switch (obj.kind) {
      case "Namespace":
        contents.namespaces.push(obj);
        break;
      case "ClusterServingRuntime":
        contents.clusterRuntimes.push(obj);
        break;
      case "ServingRuntime":
        contents.runtimes.push(obj);
        break;
      case "MLModel": {
        const model = obj as MLModel;
        if (!model.spec || typeof model.spec !== "object")
          throw new BackupError(`${source}, document ${doc}: ${id} has no spec`);
        const entry = { model, revisions: [] };
        models.set(modelKey(model), entry);
        contents.models.push(entry);
        break;
      }
      default:
        revisions.push({ doc, rev: obj as unknown as V1ControllerRevision });
    }
  });
  for (const { doc, rev } of revisions) attachRevision(rev, models, `${source}, document ${doc}`);
  for (const m of contents.models) m.revisions = newestFirst(m.revisions);
  return contents;
}

function checkedObject(value: unknown, where: string): KubeObject {
  if (!value || typeof value !== "object" || Array.isArray(value))
    throw new BackupError(
      `${where}: expected an object, got ${Array.isArray(value) ? "a list" : typeof value}`,
    );
  const obj = value as KubeObject;
  const kind = backedUpKinds.find((k) => k.kind === obj.kind);
  if (!kind) {
    throw new BackupError(
      `${where}: kind ${JSON.stringify(obj.kind)} is not one a backup holds (${backedUpKinds.map((k) => k.kind).join(", ")})`,
    );
  }
  if (obj.apiVersion !== kind.apiVersion) {
    throw new BackupError(
      `${where}: apiVersion ${JSON.stringify(obj.apiVersion)} of a ${kind.kind} must be "${kind.apiVersion}"`,
    );
  }
  if (typeof obj.metadata?.name !== "string" || !obj.metadata.name)
    throw new BackupError(`${where}: ${kind.kind} has no metadata.name`);
  if (kind.namespaced !== (typeof obj.metadata.namespace === "string" && obj.metadata.namespace !== "")) {
    throw new BackupError(
      `${where}: ${kind.kind} ${obj.metadata.name} ${kind.namespaced ? "has no metadata.namespace" : "is cluster-scoped but has metadata.namespace"}`,
    );
  }
  if (obj.metadata.uid || obj.metadata.resourceVersion || obj.metadata.ownerReferences) {
    throw new BackupError(
      `${where}: ${kind.kind} ${obj.metadata.name} has metadata.uid, resourceVersion or ownerReferences: it was read from a cluster, not written by \`mlmodel backup\``,
    );
  }
  return obj;
}

function attachRevision(
  rev: V1ControllerRevision,
  models: ReadonlyMap<string, ModelBackup>,
  where: string,
): void {
  const name = rev.metadata?.name;
  const owner = rev.metadata?.labels?.[labels.model];
  const model = owner ? models.get(`${rev.metadata?.namespace}/${owner}`) : undefined;
  if (!model) {
    throw new BackupError(
      `${where}: ControllerRevision ${name} has label ${labels.model}=${JSON.stringify(owner ?? null)}, which names no MLModel of namespace ${rev.metadata?.namespace} in the file`,
    );
  }
  if (!Number.isInteger(rev.revision) || rev.revision < 1)
    throw new BackupError(
      `${where}: ControllerRevision ${name} has revision ${JSON.stringify(rev.revision)}, expected a positive integer`,
    );
  if (!revisionHash(rev))
    throw new BackupError(`${where}: ControllerRevision ${name} has no label ${labels.revision} (its hash)`);
  if (!revisionSpec(rev)) throw new BackupError(`${where}: ControllerRevision ${name} has no data.spec`);
  const twin = model.revisions.find((r) => r.revision === rev.revision);
  if (twin) {
    throw new BackupError(
      `${where}: ControllerRevision ${name} has revision ${rev.revision}, as ${twin.metadata?.name} does: a model's revision numbers are distinct`,
    );
  }
  model.revisions.push(rev);
}

/**
 * The MLModel to create: the backed-up one without the backup's annotation and its status
 * (the status subresource takes statusMemory afterwards), its URI exact again when the file
 * has it redacted (`exactUri`, read from the Secret the annotation names).
 */
export function modelToRestore(backup: MLModel, exactUri: string | undefined): MLModel {
  const { status: _status, ...model } = backup;
  const annotations = without(model.metadata.annotations, Object.values(backupAnnotations));
  const { annotations: _a, ...metadata } = model.metadata;
  const spec = exactUri ? { ...model.spec, model: { ...model.spec.model, uri: exactUri } } : model.spec;
  return { ...model, metadata: { ...metadata, ...(annotations ? { annotations } : {}) }, spec };
}

/** The Secret restore must read for the model's exact URI, if the file has it redacted. */
export function uriSecretOf(backup: MLModel): string | undefined {
  return backup.metadata.annotations?.[backupAnnotations.uriSecret];
}

/** A backed-up revision owned by the restored model (the operator finds a model's revisions by that owner). */
export function revisionToRestore(rev: V1ControllerRevision, owner: OwnerReference): V1ControllerRevision {
  return { ...rev, metadata: { ...rev.metadata, ownerReferences: [owner] } };
}

/**
 * The backed-up revisions whose number differs from the live one of the same hash, or that
 * are missing: what restore writes again. An operator that recorded the spec's revision
 * before restore wrote the history numbered it from what it had seen.
 */
export function revisionsToRenumber(
  backup: ModelBackup,
  live: readonly V1ControllerRevision[],
): V1ControllerRevision[] {
  return backup.revisions.filter((want) => {
    const have = live.find((r) => revisionHash(r) === revisionHash(want));
    return have?.revision !== want.revision;
  });
}

/** Live revisions of the model that the backup does not have (recorded since, or by a differently configured operator). */
export function revisionsNotInBackup(
  backup: ModelBackup,
  live: readonly V1ControllerRevision[],
): V1ControllerRevision[] {
  const hashes = new Set(backup.revisions.map(revisionHash));
  return live.filter((r) => !hashes.has(revisionHash(r)));
}

/** Whether a cluster's object already says what the backup's says (same spec or data, same labels). */
export function sameContent(live: KubeObject, backedUp: KubeObject): boolean {
  const body = (o: KubeObject) => {
    const { metadata, status: _s, ...rest } = o as KubeObject & { status?: unknown };
    return canonicalJson({ ...rest, labels: metadata.labels ?? {} });
  };
  return body(portable(live)) === body(backedUp);
}
