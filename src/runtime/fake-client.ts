/**
 * FakeClient: KubeClient's methods over an in-memory object store, for unit tests of
 * reconcilers without a cluster (what controller-runtime's fake client is to Go controllers).
 * It is a KubeClient, so it goes wherever one does: a ReconcileContext, a Manager (`client`),
 * an Informer, whose list and watch it answers.
 *
 * What it does as the API server does:
 * - resourceVersions from one counter; a write with a stale metadata.resourceVersion (update,
 *   a merge patch carrying it, apply, delete preconditions) is a 409 Conflict; a write that
 *   changes nothing keeps the resourceVersion and sends no watch event; an update (replace) of
 *   a custom resource without a resourceVersion is a 422 Invalid (only built-in kinds take an
 *   unconditional update);
 * - create of an existing name: 409 AlreadyExists; get of a missing object: undefined, and
 *   patch, replace and status writes of one: 404 NotFound; generateName;
 * - metadata.generation: 1 at create, bumped by a change outside metadata and status and when
 *   deletion starts; for custom resources and the built-in kinds with a spec the API server
 *   counts (Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob,
 *   PodDisruptionBudget, Ingress, NetworkPolicy, CustomResourceDefinition), none for the others
 *   (ConfigMap, Secret, Service, HorizontalPodAutoscaler...), as a v1.36 API server does;
 * - the status subresource: writes to it change only status, other writes never change it;
 *   the built-in kinds without one (ConfigMap, Secret, Lease, Role...) answer 404 to it, and
 *   every custom resource is taken to have one;
 * - server-side apply: fields are owned per field manager (leaf paths; lists are atomic); a
 *   field another manager owns with another value is a 409 Conflict unless `force`, which
 *   takes it (the Status lists a FieldManagerConflict cause per field, naming its manager);
 *   a field the manager applied before and leaves out now is removed unless another manager
 *   owns it; create, update and patch take the fields they change for their manager;
 * - finalizers: delete sets deletionTimestamp while any remain; the write removing the last one
 *   removes the object; a write adding a finalizer to a terminating object is a 422 Invalid;
 * - owner references: removing an owner deletes, at once, every object whose owners are then
 *   all gone (the garbage collector's work, done immediately, for Background and Foreground
 *   alike), and drops the reference to it from objects that keep another owner; Orphan drops
 *   the reference only;
 * - list and watch with namespace, label selector (=, ==, !=, in, notin, exists, !exists) and
 *   field selector (any dotted path, = and !=); a watch from a resourceVersion replays what
 *   happened since, an object leaving or entering a selector is DELETED or ADDED to it, and
 *   after `compact()` a watch from an older resourceVersion answers 410 Expired, so informers
 *   relist, as they do when etcd's history is compacted.
 *
 * A Secret's stringData is stored in its data, base64-encoded, as the API server does.
 * test/integration/runtime/fake-client-parity.test.ts runs one scenario here and on the real
 * API server and compares every step.
 *
 * What it does not do: validation against schemas or defaulting (a Deployment gets no
 * spec.strategy, a Pod no status: no kubelet, scheduler or controllers run; set a status with
 * applyStatus or a status patch), admission, RBAC, namespaces that must exist, list-type merge
 * keys (a strategic merge patch is a JSON merge patch, and applied lists are replaced whole),
 * metadata.managedFields in objects (fieldOwners() shows ownership), watch bookmarks or
 * timeouts, deletion grace periods (a deleted Pod is gone at once), and the garbage collector's
 * deletion of an object whose owners were already gone when it was written (only removing an
 * owner deletes dependents here, so seeds may name owners in any order).
 */
import { randomUUID } from "node:crypto";
import type {
  AppliedVersion,
  ApplyOptions,
  DeleteOptions,
  ListOptions,
  ListResult,
  PatchType,
  RequestRecord,
  Verb,
  WatchOptions,
} from "./client.ts";
import { KubeClient } from "./client.ts";
import { type Clock, realClock } from "./clock.ts";
import { ApiError } from "./errors.ts";
import {
  fieldSelectorMatcher,
  invalid,
  isMap,
  jsonPatch,
  labelsMatch,
  leafPaths,
  mergePatch,
  parseLabelSelector,
  removeAt,
  sameJson,
  setAt,
  valueAt,
} from "./fake-fields.ts";
import { apiVersionOf, builtinKinds, kindName, objectPath, type ResourceKind } from "./kinds.ts";
import { deepFreeze } from "./store.ts";
import type { KubeObject, ObjectKey, WatchEvent } from "./types.ts";
import { keyString } from "./types.ts";

export interface FakeClientOptions {
  /** Time of creationTimestamp and deletionTimestamp (default: the real clock). */
  clock?: Clock;
  /**
   * Kinds the fake knows from the start: discovery (apiResources) lists them. Built-in kinds
   * are always known; any other kind becomes known when it is first written or served().
   */
  kinds?: ResourceKind[];
  /** Field manager of a create, update or patch that names none (default "fake-client"). */
  defaultFieldManager?: string;
}

/** One call the fake answered: its verb, object and HTTP code (201 created, 404, 409...). */
export interface FakeRequest {
  verb: Verb;
  kind: string;
  namespace?: string;
  name?: string;
  subresource?: string;
  code: number;
}

/** Which calls `failNext` fails: every given field must match. */
export interface FakeFailureMatch {
  verb?: Verb;
  kind?: ResourceKind;
  name?: string;
}

interface Stored {
  kind: ResourceKind;
  object: KubeObject;
  /** "manager\0Apply" or "manager\0Update" -> the leaf paths it owns. */
  owners: Map<string, Set<string>>;
}

interface HistoryEvent {
  resourceVersion: number;
  kindId: string;
  type: "ADDED" | "MODIFIED" | "DELETED";
  object: Readonly<KubeObject>;
  /** The object before a MODIFIED: a watch with a selector tells entering from leaving. */
  old?: Readonly<KubeObject>;
}

/** metadata members the server sets: never owned by a manager, never taken from a write. */
const systemMetadata = [
  "uid",
  "resourceVersion",
  "generation",
  "creationTimestamp",
  "deletionTimestamp",
  "deletionGracePeriodSeconds",
  "managedFields",
  "selfLink",
];

export class FakeClient extends KubeClient {
  /** Every call answered, in order. */
  readonly requests: FakeRequest[] = [];
  readonly #objects = new Map<string, Stored>();
  readonly #known = new Map<string, ResourceKind>();
  readonly #unserved = new Set<string>();
  readonly #history: HistoryEvent[] = [];
  readonly #wakers = new Set<() => void>();
  readonly #listeners: ((r: RequestRecord) => void)[] = [];
  readonly #failures: { match: FakeFailureMatch; error: ApiError }[] = [];
  readonly #clock: Clock;
  readonly #defaultManager: string;
  #resourceVersion = 1000;
  /** Watches from a resourceVersion below this answer 410: their history is gone. */
  #compactedAt = 0;
  #compactions = 0;

  constructor(opts: FakeClientOptions = {}) {
    super({ server: "http://fake-client.invalid", headers: async () => ({}) }, { userAgent: "fake-client" });
    this.#clock = opts.clock ?? realClock;
    this.#defaultManager = opts.defaultFieldManager ?? "fake-client";
    for (const kind of [...Object.values(builtinKinds), ...(opts.kinds ?? [])]) this.#know(kind);
  }

  // ---- test helpers ----

  /**
   * Stores objects as creates would (new uid, resourceVersion, generation), their status
   * kept (a create drops it), without recording requests: the world a test starts from.
   */
  seed(kind: ResourceKind, ...objects: KubeObject[]): this {
    for (const obj of objects) this.#create(kind, obj, this.#defaultManager, "Update", true);
    return this;
  }

  /** The stored object (a copy), or undefined. Not recorded as a request. */
  peek<T extends KubeObject = KubeObject>(kind: ResourceKind, key: ObjectKey): T | undefined {
    const stored = this.#objects.get(this.#id(kind, key));
    return stored ? (structuredClone(stored.object) as T) : undefined;
  }

  /** Every stored object of `kind` (copies), optionally of one namespace, sorted by key. */
  objects<T extends KubeObject = KubeObject>(kind: ResourceKind, namespace?: string): T[] {
    return this.#select(kind, namespace).map((s) => structuredClone(s.object) as T);
  }

  /** Field manager -> the fields it owns (".spec.replicas"), as server-side apply keeps them. */
  fieldOwners(kind: ResourceKind, key: ObjectKey): Record<string, string[]> {
    const stored = this.#mustGet(kind, key);
    const out: Record<string, string[]> = {};
    for (const [owner, paths] of stored.owners) {
      if (paths.size === 0) continue;
      const [manager] = owner.split("\0");
      out[manager!] = [...(out[manager!] ?? []), ...[...paths].map(dotted)].sort();
    }
    return out;
  }

  /** The next call matching `match` fails with `error` (an HTTP code makes a plain ApiError). */
  failNext(match: FakeFailureMatch, error: ApiError | number): void {
    const err =
      typeof error === "number" ? new ApiError(error, `${error} injected by FakeClient.failNext`) : error;
    this.#failures.push({ match, error: err });
  }

  /** Makes `kind` known to discovery (as installing its CRD would) and served again. */
  serve(kind: ResourceKind): void {
    this.#know(kind);
    this.#unserved.delete(kindId(kind));
  }

  /** Stops serving `kind` (as deleting its CRD would, objects aside): every call of it is a 404. */
  unserve(kind: ResourceKind): void {
    this.#unserved.add(kindId(kind));
  }

  /**
   * Forgets the watch history, as etcd's compaction does: open watches end with 410 Expired,
   * and a watch from an older resourceVersion answers 410, so informers relist.
   */
  compact(): void {
    this.#history.length = 0;
    this.#compactedAt = this.#resourceVersion;
    this.#compactions++;
    this.#wake();
  }

  /** The current resourceVersion (the last write's). */
  get resourceVersion(): string {
    return String(this.#resourceVersion);
  }

  // ---- KubeClient ----

  override onRequest(fn: (r: RequestRecord) => void): void {
    this.#listeners.push(fn);
  }

  override async get<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    opts: { signal?: AbortSignal; subresource?: string } = {},
  ): Promise<T | undefined> {
    return this.#call("get", kind, key, opts.subresource, () => {
      if (opts.subresource && opts.subresource !== "status")
        throw new TypeError(`FakeClient serves no "${opts.subresource}" subresource (only status)`);
      const stored = this.#objects.get(this.#id(kind, key));
      if (!stored) throw notFound(kind, key);
      return structuredClone(stored.object) as T;
    }).catch((err: unknown) => {
      if (err instanceof ApiError && err.code === 404) return undefined;
      throw err;
    });
  }

  override async apiResources(
    group: string,
    version: string,
  ): Promise<{ name: string; kind: string; namespaced: boolean }[] | undefined> {
    const resources = [...this.#known.values()]
      .filter((k) => k.group === group && k.version === version && !this.#unserved.has(kindId(k)))
      .map((k) => ({ name: k.plural, kind: k.kind, namespaced: k.namespaced }));
    return resources.length > 0 ? resources : undefined;
  }

  override async list<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    opts: ListOptions = {},
  ): Promise<ListResult<T>> {
    return this.#call(
      "list",
      kind,
      opts.namespace ? { namespace: opts.namespace } : undefined,
      undefined,
      () => {
        const matches = this.#matcher(opts);
        const all = this.#select(kind, opts.namespace).filter((s) => matches(s.object));
        const start = opts.continue ? Number(opts.continue) : 0;
        const end = opts.limit ? start + opts.limit : all.length;
        const result: ListResult<T> = {
          items: all.slice(start, end).map((s) => structuredClone(s.object) as T),
          resourceVersion: String(this.#resourceVersion),
        };
        if (end < all.length) result.continue = String(end);
        return result;
      },
    );
  }

  override async create<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    obj: T,
    opts: { fieldManager?: string; signal?: AbortSignal } = {},
  ): Promise<T> {
    return this.#call("create", kind, keyOrUndefined(obj), undefined, () => {
      const stored = this.#create(kind, obj, opts.fieldManager ?? this.#defaultManager);
      return structuredClone(stored.object) as T;
    });
  }

  override async replace<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    obj: T,
    opts: { fieldManager?: string; subresource?: string; signal?: AbortSignal } = {},
  ): Promise<T> {
    const key = requireKey(kind, obj);
    return this.#call("update", kind, key, opts.subresource, () => {
      const stored = this.#mustGet(kind, key);
      if (!obj.metadata.resourceVersion && !builtin(kind))
        throw invalid(
          `${describe(kind, key)}: metadata.resourceVersion must be specified for an update of a custom resource (read the object and send its resourceVersion, or patch or apply instead)`,
        );
      checkResourceVersion(kind, key, stored, obj.metadata.resourceVersion);
      const next =
        opts.subresource === "status" ? withStatusOf(stored.object, obj) : withMainOf(stored.object, obj);
      return structuredClone(this.#update(stored, next, opts.fieldManager, opts.subresource).object) as T;
    });
  }

  override async apply<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    obj: T,
    opts: ApplyOptions,
  ): Promise<T> {
    return structuredClone((await this.#applyCall(kind, obj, opts, undefined)).object) as T;
  }

  override async applyDiscardingAnswer(
    kind: ResourceKind,
    obj: KubeObject,
    opts: ApplyOptions,
  ): Promise<void> {
    await this.#applyCall(kind, obj, opts, undefined);
  }

  override async applyForVersion(
    kind: ResourceKind,
    obj: KubeObject,
    opts: ApplyOptions,
  ): Promise<AppliedVersion> {
    const { object, created } = await this.#applyCall(kind, obj, opts, undefined);
    return { created, uid: object.metadata.uid, resourceVersion: object.metadata.resourceVersion };
  }

  override async applyStatus<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    obj: T,
    opts: ApplyOptions,
  ): Promise<T> {
    return structuredClone((await this.#applyCall(kind, obj, opts, "status")).object) as T;
  }

  override async patch<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    patch: unknown,
    type: PatchType,
    opts: { subresource?: string; fieldManager?: string; force?: boolean; signal?: AbortSignal } = {},
  ): Promise<T> {
    if (type === "apply") {
      const obj = { ...(patch as KubeObject), metadata: { ...(patch as KubeObject).metadata, ...key } };
      const applyOpts: ApplyOptions = { fieldManager: opts.fieldManager ?? "", force: opts.force ?? false };
      return structuredClone((await this.#applyCall(kind, obj, applyOpts, opts.subresource)).object) as T;
    }
    return this.#call("patch", kind, key, opts.subresource, () => {
      const stored = this.#mustGet(kind, key);
      let patched: unknown;
      if (type === "json") patched = jsonPatch(stored.object, patch);
      else {
        checkResourceVersion(kind, key, stored, (patch as KubeObject | undefined)?.metadata?.resourceVersion);
        patched = mergePatch(stored.object, patch);
      }
      if (!isMap(patched) || !isMap(patched["metadata"]))
        throw invalid(`the patch of ${describe(kind, key)} leaves no object with metadata`);
      const next =
        opts.subresource === "status"
          ? withStatusOf(stored.object, patched as KubeObject)
          : withMainOf(stored.object, patched as KubeObject);
      return structuredClone(this.#update(stored, next, opts.fieldManager, opts.subresource).object) as T;
    });
  }

  override async delete(kind: ResourceKind, key: ObjectKey, opts: DeleteOptions = {}): Promise<boolean> {
    try {
      await this.#call("delete", kind, key, undefined, () => {
        const stored = this.#mustGet(kind, key);
        const { uid, resourceVersion } = opts.preconditions ?? {};
        if (uid !== undefined && uid !== stored.object.metadata.uid)
          throw conflict(
            kind,
            key,
            `the precondition uid ${uid} does not match the object's ${stored.object.metadata.uid}`,
          );
        checkResourceVersion(kind, key, stored, resourceVersion);
        this.#delete(stored, opts.propagationPolicy ?? "Background");
      });
      return true;
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return false;
      throw err;
    }
  }

  override async *watch<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    opts: WatchOptions = {},
    signal?: AbortSignal,
  ): AsyncGenerator<WatchEvent<T>> {
    const pending: WatchEvent<T>[] = [];
    let after = 0;
    const compactions = this.#compactions;
    const matches = await this.#call(
      "watch",
      kind,
      opts.namespace ? { namespace: opts.namespace } : undefined,
      undefined,
      () => {
        const matches = this.#matcher(opts);
        const rv = opts.resourceVersion;
        if (!rv || rv === "0") {
          // From now, with every current object ADDED first, as the API server starts a watch
          // without a resourceVersion.
          for (const s of this.#select(kind, opts.namespace)) {
            if (matches(s.object)) pending.push({ type: "ADDED", object: structuredClone(s.object) as T });
          }
          after = this.#resourceVersion;
        } else {
          after = Number(rv);
          if (!Number.isInteger(after)) throw invalidResourceVersion(rv);
          if (after < this.#compactedAt) throw expired(kind, rv, this.#compactedAt);
        }
        return matches;
      },
    );
    opts.onOpen?.();
    const id = kindId(kind);
    for (;;) {
      for (let i = firstAfter(this.#history, after); i < this.#history.length; i++) {
        const event = this.#history[i]!;
        after = event.resourceVersion;
        if (event.kindId !== id) continue;
        if (opts.namespace && event.object.metadata.namespace !== opts.namespace) continue;
        const seen = watchEventFor(event, matches);
        if (seen) pending.push(structuredClone(seen) as WatchEvent<T>);
      }
      while (pending.length > 0) yield pending.shift()!;
      if (signal?.aborted) return;
      if (this.#compactions !== compactions) throw expired(kind, String(after), this.#compactedAt);
      // Writes made while the events above were consumed are in the history already.
      if ((this.#history.at(-1)?.resourceVersion ?? 0) > after) continue;
      await this.#nextChange(signal);
      if (signal?.aborted) return;
    }
  }

  // ---- the store ----

  async #applyCall(
    kind: ResourceKind,
    obj: KubeObject,
    opts: ApplyOptions,
    subresource: string | undefined,
  ): Promise<{ object: KubeObject; created: boolean }> {
    if (!opts?.fieldManager)
      throw new TypeError(`apply of ${kindName(kind)} needs opts.fieldManager (e.g. "mlmodel-operator")`);
    const key = requireKey(kind, obj);
    return this.#call("apply", kind, key, subresource, () => {
      const stored = this.#objects.get(this.#id(kind, key));
      if (!stored) {
        if (subresource) throw notFound(kind, key);
        const created = this.#create(
          kind,
          ownedPartOf(obj, undefined, kind, key),
          opts.fieldManager,
          "Apply",
        );
        return { object: created.object, created: true };
      }
      checkResourceVersion(kind, key, stored, obj.metadata.resourceVersion);
      return { object: this.#apply(stored, obj, opts, subresource).object, created: false };
    });
  }

  #create(
    kind: ResourceKind,
    obj: KubeObject,
    manager: string,
    operation: "Apply" | "Update" = "Update",
    keepStatus = false,
  ): Stored {
    this.#know(kind);
    const meta = obj.metadata ?? {};
    let name = meta.name;
    if (!name && meta.generateName) name = `${meta.generateName}${randomSuffix()}`;
    if (!name) throw invalid(`${kindName(kind)}: metadata.name or metadata.generateName is required`);
    const namespace = kind.namespaced ? meta.namespace : undefined;
    if (kind.namespaced && !namespace)
      throw new TypeError(`${kindName(kind)} "${name}" needs metadata.namespace (the kind is namespaced)`);
    const key: ObjectKey = namespace ? { namespace, name } : { name };
    const id = this.#id(kind, key);
    if (this.#objects.has(id)) {
      throw new ApiError(409, `409 AlreadyExists ${describe(kind, key)} already exists`, {
        reason: "AlreadyExists",
        status: { kind: "Status", status: "Failure", reason: "AlreadyExists", code: 409 },
      });
    }
    const { status: _status, ...rest } = obj;
    const object: KubeObject = {
      ...structuredClone(rest),
      apiVersion: apiVersionOf(kind),
      kind: kind.kind,
      metadata: {
        ...withoutSystemMetadata(structuredClone(meta)),
        name,
        ...(namespace ? { namespace } : {}),
        uid: randomUUID(),
        ...(counted(kind) ? { generation: 1 } : {}),
        creationTimestamp: timestamp(this.#clock),
      },
    };
    if (!namespace) delete object.metadata.namespace;
    if (keepStatus && obj["status"] !== undefined) object["status"] = structuredClone(obj["status"]);
    foldStringData(kind, object);
    const owned = leafPaths(ownedPartOf(object, undefined));
    if (object["status"] !== undefined) leafPaths(ownedPartOf(object, "status"), [], owned);
    const stored: Stored = { kind, object, owners: new Map([[`${manager}\0${operation}`, owned]]) };
    this.#objects.set(id, stored);
    this.#commit(stored, "ADDED");
    return stored;
  }

  /** Server-side apply of `obj` onto a stored object (main resource or status). */
  #apply(stored: Stored, obj: KubeObject, opts: ApplyOptions, subresource: string | undefined): Stored {
    const applied = ownedPartOf(obj, subresource);
    const fields = leafPaths(applied);
    const me = `${opts.fieldManager}\0Apply`;
    const taken: { paths: Set<string>; path: string; manager: string }[] = [];
    for (const [owner, paths] of stored.owners) {
      if (owner === me) continue;
      for (const path of paths) {
        if (!fields.has(path)) continue;
        const parts = JSON.parse(path) as string[];
        if (sameJson(valueAt(stored.object, parts), valueAt(applied, parts))) continue;
        taken.push({ paths, path, manager: owner.split("\0")[0]! });
      }
    }
    if (taken.length > 0 && !opts.force) throw applyConflict(stored.kind, keyOfStored(stored), taken);
    const next = structuredClone(stored.object) as KubeObject & Record<string, unknown>;
    for (const path of stored.owners.get(me) ?? []) {
      if (fields.has(path) || this.#ownedByAnother(stored, me, path)) continue;
      removeAt(next, JSON.parse(path) as string[]);
    }
    for (const path of fields) {
      const parts = JSON.parse(path) as string[];
      setAt(next, parts, valueAt(applied, parts));
    }
    checkFinalizers(stored, next);
    for (const { paths, path } of taken) paths.delete(path);
    stored.owners.set(me, fields);
    return this.#commitChange(stored, next as KubeObject);
  }

  /** An update or patch: `next` replaces the object; the fields it changed go to `manager`. */
  #update(
    stored: Stored,
    next: KubeObject,
    manager: string | undefined,
    subresource: string | undefined,
  ): Stored {
    checkFinalizers(stored, next);
    const before = leafPaths(ownedPartOf(stored.object, subresource));
    const after = leafPaths(ownedPartOf(next, subresource));
    const changed = [...after].filter((p) => {
      const parts = JSON.parse(p) as string[];
      return !before.has(p) || !sameJson(valueAt(stored.object, parts), valueAt(next, parts));
    });
    const removed = [...before].filter((p) => !after.has(p));
    for (const paths of stored.owners.values()) {
      for (const p of [...changed, ...removed]) paths.delete(p);
    }
    const me = `${manager ?? this.#defaultManager}\0Update`;
    const mine = stored.owners.get(me) ?? new Set<string>();
    for (const p of changed) mine.add(p);
    stored.owners.set(me, mine);
    return this.#commitChange(stored, next);
  }

  #ownedByAnother(stored: Stored, me: string, path: string): boolean {
    for (const [owner, paths] of stored.owners) if (owner !== me && paths.has(path)) return true;
    return false;
  }

  /** Stores `next` unless it changes nothing; a terminating object without finalizers goes. */
  #commitChange(stored: Stored, next: KubeObject): Stored {
    const old = stored.object;
    foldStringData(stored.kind, next);
    next.metadata.resourceVersion = old.metadata.resourceVersion;
    next.metadata.generation = old.metadata.generation;
    if (sameJson(next, old)) return stored;
    if (old.metadata.generation !== undefined && !sameJson(specOf(next), specOf(old)))
      next.metadata.generation = old.metadata.generation + 1;
    stored.object = next;
    if (next.metadata.deletionTimestamp && !next.metadata.finalizers?.length) {
      this.#remove(stored, "Background");
      return stored;
    }
    this.#commit(stored, "MODIFIED", old);
    return stored;
  }

  #delete(stored: Stored, propagation: NonNullable<DeleteOptions["propagationPolicy"]>): void {
    if (stored.object.metadata.finalizers?.length) {
      if (stored.object.metadata.deletionTimestamp) return;
      const old = stored.object;
      stored.object = structuredClone(old);
      stored.object.metadata.deletionTimestamp = timestamp(this.#clock);
      stored.object.metadata.deletionGracePeriodSeconds = 0;
      if (old.metadata.generation !== undefined)
        stored.object.metadata.generation = old.metadata.generation + 1;
      this.#commit(stored, "MODIFIED", old);
      return;
    }
    this.#remove(stored, propagation);
  }

  /** Removes the object, then does the garbage collector's work for its dependents. */
  #remove(stored: Stored, propagation: NonNullable<DeleteOptions["propagationPolicy"]>): void {
    this.#objects.delete(this.#id(stored.kind, keyOfStored(stored)));
    stored.object = structuredClone(stored.object);
    this.#commit(stored, "DELETED");
    const uid = stored.object.metadata.uid;
    for (const dependent of [...this.#objects.values()]) {
      const refs = dependent.object.metadata.ownerReferences ?? [];
      if (!refs.some((r) => r.uid === uid)) continue;
      const living = refs.filter((r) => r.uid !== uid && this.#hasUid(r.uid));
      if (propagation === "Orphan" || living.length > 0) {
        const next = structuredClone(dependent.object);
        next.metadata.ownerReferences = refs.filter((r) => r.uid !== uid);
        if (next.metadata.ownerReferences.length === 0) delete next.metadata.ownerReferences;
        this.#commitChange(dependent, next);
      } else if (this.#objects.get(this.#id(dependent.kind, keyOfStored(dependent))) === dependent) {
        this.#delete(dependent, "Background");
      }
    }
  }

  #hasUid(uid: string): boolean {
    for (const s of this.#objects.values()) if (s.object.metadata.uid === uid) return true;
    return false;
  }

  /** A new resourceVersion for the object, and its watch event. */
  #commit(stored: Stored, type: HistoryEvent["type"], old?: KubeObject): void {
    this.#resourceVersion++;
    stored.object.metadata.resourceVersion = String(this.#resourceVersion);
    const event: HistoryEvent = {
      resourceVersion: this.#resourceVersion,
      kindId: kindId(stored.kind),
      type,
      object: deepFreeze(structuredClone(stored.object)),
    };
    if (old) event.old = deepFreeze(structuredClone(old));
    this.#history.push(event);
    this.#wake();
  }

  #wake(): void {
    const wakers = [...this.#wakers];
    this.#wakers.clear();
    for (const wake of wakers) wake();
  }

  /** Resolves at the next write, compaction or abort. */
  #nextChange(signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.#wakers.delete(done);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      this.#wakers.add(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  /** Runs one call: failures injected first, then `fn`; records it with its code. */
  async #call<R>(
    verb: Verb,
    kind: ResourceKind,
    key: Partial<ObjectKey> | undefined,
    subresource: string | undefined,
    fn: () => R,
  ): Promise<R> {
    const request: FakeRequest = { verb, kind: kindName(kind), code: 200 };
    if (key?.namespace) request.namespace = key.namespace;
    if (key?.name) request.name = key.name;
    if (subresource) request.subresource = subresource;
    try {
      if (this.#unserved.has(kindId(kind)))
        throw new ApiError(
          404,
          `404 NotFound the server could not find the requested resource (${kindName(kind)})`,
          {
            reason: "NotFound",
          },
        );
      if (subresource === "status" && statusless.has(kindId(kind)))
        throw new ApiError(
          404,
          `404 NotFound the server could not find the requested resource (${kind.plural}/status: ${kindName(kind)} has no status subresource)`,
          { reason: "NotFound" },
        );
      const failure = this.#failures.findIndex(({ match }) => matchesFailure(match, verb, kind, key?.name));
      if (failure >= 0) throw this.#failures.splice(failure, 1)[0]!.error;
      const result = fn();
      if (verb === "create" || (verb === "apply" && (result as { created?: boolean }).created))
        request.code = 201;
      return result;
    } catch (err) {
      request.code = err instanceof ApiError ? err.code : 0;
      throw err;
    } finally {
      this.requests.push(request);
      const method = {
        get: "GET",
        list: "GET",
        watch: "GET",
        create: "POST",
        update: "PUT",
        patch: "PATCH",
        apply: "PATCH",
        delete: "DELETE",
      }[verb];
      for (const fn of this.#listeners) fn({ verb, method, code: request.code });
    }
  }

  #matcher(opts: { labelSelector?: string; fieldSelector?: string }): (obj: KubeObject) => boolean {
    const labels = opts.labelSelector ? parseLabelSelector(opts.labelSelector) : [];
    const fields = opts.fieldSelector ? fieldSelectorMatcher(opts.fieldSelector) : () => true;
    return (obj) => labelsMatch(labels, obj.metadata.labels) && fields(obj);
  }

  #select(kind: ResourceKind, namespace: string | undefined): Stored[] {
    const prefix = `${kindId(kind)} `;
    const out: Stored[] = [];
    for (const [id, stored] of this.#objects) {
      if (!id.startsWith(prefix)) continue;
      if (namespace && kind.namespaced && stored.object.metadata.namespace !== namespace) continue;
      out.push(stored);
    }
    return out.sort((a, b) => keyString(keyOfStored(a)).localeCompare(keyString(keyOfStored(b))));
  }

  #mustGet(kind: ResourceKind, key: ObjectKey): Stored {
    const stored = this.#objects.get(this.#id(kind, key));
    if (!stored) throw notFound(kind, key);
    return stored;
  }

  #id(kind: ResourceKind, key: ObjectKey): string {
    objectPath(kind, key); // the same TypeErrors as KubeClient for a bad key
    return `${kindId(kind)} ${keyString(kind.namespaced ? key : { name: key.name })}`;
  }

  #know(kind: ResourceKind): void {
    const id = kindId(kind);
    if (!this.#known.has(`${id}/${kind.version}`)) this.#known.set(`${id}/${kind.version}`, kind);
  }
}

/** The index of the first event after resourceVersion `after` (the history is in order). */
function firstAfter(history: readonly HistoryEvent[], after: number): number {
  let low = 0;
  let high = history.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (history[mid]!.resourceVersion <= after) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** What a watch with selectors sees of a history event, or nothing. */
function watchEventFor(event: HistoryEvent, matches: (obj: KubeObject) => boolean): WatchEvent | undefined {
  const now = matches(event.object);
  if (event.type !== "MODIFIED") return now ? { type: event.type, object: event.object } : undefined;
  const before = event.old ? matches(event.old) : now;
  if (now) return { type: before ? "MODIFIED" : "ADDED", object: event.object };
  return before ? { type: "DELETED", object: event.object } : undefined;
}

function matchesFailure(
  match: FakeFailureMatch,
  verb: Verb,
  kind: ResourceKind,
  name: string | undefined,
): boolean {
  return (
    (!match.verb || match.verb === verb) &&
    (!match.kind || kindId(match.kind) === kindId(kind)) &&
    (!match.name || match.name === name)
  );
}

/** A Secret's stringData written into its data, base64-encoded, as the API server stores it. */
function foldStringData(kind: ResourceKind, obj: KubeObject): void {
  const stringData = obj["stringData"];
  if (kind.group !== "" || kind.kind !== "Secret" || !isMap(stringData)) return;
  const data = isMap(obj["data"]) ? { ...obj["data"] } : {};
  for (const [key, value] of Object.entries(stringData))
    data[key] = Buffer.from(String(value)).toString("base64");
  obj["data"] = data;
  delete obj["stringData"];
}

const builtinIds = new Set(Object.values(builtinKinds).map(kindId));

/** Whether `kind` is one the API server has built in, not a custom resource. */
function builtin(kind: ResourceKind): boolean {
  return builtinIds.has(kindId(kind));
}

/** A terminating object takes no new finalizers: 422, as the API server's metadata validation. */
function checkFinalizers(stored: Stored, next: KubeObject): void {
  if (!stored.object.metadata.deletionTimestamp) return;
  const had = new Set(stored.object.metadata.finalizers ?? []);
  const added = (next.metadata.finalizers ?? []).filter((f) => !had.has(f));
  if (added.length > 0)
    throw invalid(
      `${describe(stored.kind, keyOfStored(stored))}: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers ${JSON.stringify(added)}`,
    );
}

/** Built-in kinds without a status subresource: a status read or write of one is a 404. */
const statusless = new Set(
  [
    "Endpoints",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Event",
    "CoreEvent",
    "ControllerRevision",
    "Lease",
    "NetworkPolicy",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
  ].map((name) => kindId(builtinKinds[name as keyof typeof builtinKinds])),
);

/** Built-in kinds whose objects get no metadata.generation from the API server. */
const uncounted = new Set(
  [
    "Service",
    "Endpoints",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "Namespace",
    "Node",
    "Event",
    "CoreEvent",
    "ControllerRevision",
    "Lease",
    "HorizontalPodAutoscaler",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
  ].map((name) => kindId(builtinKinds[name as keyof typeof builtinKinds])),
);

/** Whether the API server keeps metadata.generation for objects of `kind`. */
function counted(kind: ResourceKind): boolean {
  return !uncounted.has(kindId(kind));
}

/** The group and plural: the same objects whatever version they are read at. */
function kindId(kind: ResourceKind): string {
  return `${kind.plural}.${kind.group}`;
}

/**
 * The fields of `obj` a write sets, as owned by its field manager: for the main resource all but
 * status and the server's metadata (name and namespace are identity, not fields); for status,
 * status alone. With `kind`, the result is a whole object to create.
 */
function ownedPartOf(obj: KubeObject, subresource: string | undefined): Record<string, unknown>;
function ownedPartOf(obj: KubeObject, subresource: undefined, kind: ResourceKind, key: ObjectKey): KubeObject;
function ownedPartOf(
  obj: KubeObject,
  subresource: string | undefined,
  kind?: ResourceKind,
  key?: ObjectKey,
): Record<string, unknown> {
  if (subresource === "status")
    return obj["status"] === undefined ? {} : { status: structuredClone(obj["status"]) };
  const { apiVersion: _v, kind: _k, status: _s, metadata, ...rest } = structuredClone(obj);
  const { name: _n, namespace: _ns, generateName: _g, ...fields } = withoutSystemMetadata(metadata ?? {});
  const out: Record<string, unknown> = { ...rest };
  if (Object.keys(fields).length > 0) out["metadata"] = fields;
  if (kind && key)
    return { ...out, apiVersion: apiVersionOf(kind), kind: kind.kind, metadata: { ...fields, ...key } };
  return out;
}

function withoutSystemMetadata<M extends Record<string, unknown>>(meta: M): M {
  const out = { ...meta };
  for (const field of systemMetadata) delete out[field];
  return out;
}

/** The stored object with the main resource of `obj` (its status and server metadata kept). */
function withMainOf(stored: KubeObject, obj: KubeObject): KubeObject {
  const next: KubeObject = {
    ...structuredClone(obj),
    apiVersion: stored.apiVersion,
    kind: stored.kind,
    metadata: { ...withoutSystemMetadata(structuredClone(obj.metadata)), ...serverMetadata(stored) },
  };
  delete next["status"];
  if (stored["status"] !== undefined) next["status"] = structuredClone(stored["status"]);
  return next;
}

/** The stored object with the status of `obj`, nothing else. */
function withStatusOf(stored: KubeObject, obj: KubeObject): KubeObject {
  const next = structuredClone(stored);
  if (obj["status"] === undefined) delete next["status"];
  else next["status"] = structuredClone(obj["status"]);
  return next;
}

function serverMetadata(stored: KubeObject): Record<string, unknown> {
  const out: Record<string, unknown> = { name: stored.metadata.name };
  if (stored.metadata.namespace) out["namespace"] = stored.metadata.namespace;
  for (const field of systemMetadata) {
    if (stored.metadata[field] !== undefined) out[field] = stored.metadata[field];
  }
  return out;
}

/** What metadata.generation follows: everything outside metadata and status. */
function specOf(obj: KubeObject): unknown {
  const { metadata: _m, status: _s, ...rest } = obj;
  return rest;
}

function checkResourceVersion(
  kind: ResourceKind,
  key: ObjectKey,
  stored: Stored,
  wanted: string | undefined,
): void {
  if (wanted === undefined || wanted === "" || wanted === stored.object.metadata.resourceVersion) return;
  throw conflict(
    kind,
    key,
    `Operation cannot be fulfilled on ${describe(kind, key)}: the object has been modified; please apply your changes to the latest version and try again (resourceVersion ${wanted}, stored ${stored.object.metadata.resourceVersion})`,
  );
}

function conflict(kind: ResourceKind, key: ObjectKey, message: string, causes?: unknown[]): ApiError {
  return new ApiError(409, `409 Conflict ${message}`, {
    reason: "Conflict",
    status: {
      kind: "Status",
      status: "Failure",
      reason: "Conflict",
      code: 409,
      message,
      details: { name: key.name, kind: kind.plural, ...(causes ? { causes } : {}) },
    },
  });
}

/** An apply's conflicts, each a cause as the API server lists it: the manager and the field. */
function applyConflict(
  kind: ResourceKind,
  key: ObjectKey,
  conflicts: readonly { path: string; manager: string }[],
): ApiError {
  const causes = conflicts.map(({ path, manager }) => ({
    reason: "FieldManagerConflict",
    message: `conflict with "${manager}"`,
    field: dotted(path),
  }));
  const message = `Apply failed with ${causes.length} conflict(s): ${causes.map((c) => `${c.message}: ${c.field}`).join("; ")}`;
  return conflict(kind, key, message, causes);
}

function notFound(kind: ResourceKind, key: ObjectKey): ApiError {
  const message = `${describe(kind, key)} not found`;
  return new ApiError(404, `404 NotFound ${message}`, {
    reason: "NotFound",
    status: { kind: "Status", status: "Failure", reason: "NotFound", code: 404, message },
  });
}

function expired(kind: ResourceKind, from: string, compactedAt: number): ApiError {
  const message = `too old resource version: ${from} (${compactedAt})`;
  return new ApiError(410, `watch ${kindName(kind)}: 410 Expired ${message}`, {
    reason: "Expired",
    verb: "watch",
    status: { kind: "Status", status: "Failure", reason: "Expired", code: 410, message },
  });
}

function invalidResourceVersion(rv: string): ApiError {
  return invalid(`resourceVersion "${rv}" is not a resourceVersion this server gave (a whole number)`);
}

function describe(kind: ResourceKind, key: ObjectKey): string {
  return `${kindName(kind)} "${keyString(key)}"`;
}

function requireKey(kind: ResourceKind, obj: KubeObject): ObjectKey {
  const name = obj.metadata?.name;
  if (!name) throw new TypeError(`${kindName(kind)} object needs metadata.name, got ${JSON.stringify(name)}`);
  if (!kind.namespaced) return { name };
  const namespace = obj.metadata.namespace;
  if (!namespace)
    throw new TypeError(`${kindName(kind)} "${name}" needs metadata.namespace (the kind is namespaced)`);
  return { namespace, name };
}

function keyOrUndefined(obj: KubeObject): Partial<ObjectKey> {
  const out: Partial<ObjectKey> = {};
  if (obj.metadata?.namespace) out.namespace = obj.metadata.namespace;
  if (obj.metadata?.name) out.name = obj.metadata.name;
  return out;
}

function keyOfStored(stored: Stored): ObjectKey {
  const { name, namespace } = stored.object.metadata;
  return namespace ? { namespace, name: name! } : { name: name! };
}

/** A leaf path as kubectl shows it: `.spec.template.metadata.labels.app`. */
function dotted(path: string): string {
  return (JSON.parse(path) as string[]).map((p) => `.${p}`).join("");
}

function timestamp(clock: Clock): string {
  return new Date(clock.now()).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function randomSuffix(): string {
  const letters = "bcdfghjklmnpqrstvwxz2456789";
  return Array.from({ length: 5 }, () => letters[Math.floor(Math.random() * letters.length)]).join("");
}
