/**
 * What the MLModel reconcile's unit tests run it against: in-memory caches built from the
 * controller's own cache declarations (same indexes, same Secret transform), a recording client
 * that keeps every write (verb, kind, name, body) and can be told to fail one (409, 404, 422),
 * and an Event recorder that keeps every Event. `settle()` lets the caches catch up with the
 * writes made so far, as the informers would, so a test can walk a model through its life.
 */
import assert from "node:assert/strict";
import pino from "pino";
import { clusterServingRuntimeKind, mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { operatorAccess } from "../../../src/operator/access.ts";
import { httpRouteKind } from "../../../src/operator/canary/desired.ts";
import { servingPodTemplate } from "../../../src/operator/desired.ts";
import { modelCaches } from "../../../src/operator/mlmodel/caches.ts";
import type { MLModelContext, ModelClient } from "../../../src/operator/mlmodel/context.ts";
import { ModelMemory } from "../../../src/operator/mlmodel/memory.ts";
import { reconcileMLModel } from "../../../src/operator/mlmodel/reconcile.ts";
import { countsSettleMs } from "../../../src/operator/mlmodel/report.ts";
import type { OwnWrites } from "../../../src/operator/mlmodel/wakes.ts";
import { type OperatorConfig, planModel } from "../../../src/operator/plan.ts";
import { resolveRuntime } from "../../../src/operator/runtime-selection.ts";
import {
  ApiError,
  type AppliedVersion,
  type ApplyOptions,
  type DeleteOptions,
  type EventType,
  type KubeObject,
  kindName,
  type ListOptions,
  type ListResult,
  MemoryStore,
  type ObjectKey,
  type PatchType,
  type ReconcileResult,
  type ResourceKind,
  type Store,
  type StoreChange,
} from "../../../src/runtime/index.ts";
import { tfServing } from "./fixtures.ts";

export type WriteVerb = "apply" | "applyStatus" | "patch" | "delete" | "create";

export interface Write {
  verb: WriteVerb;
  kind: ResourceKind;
  namespace?: string;
  name: string;
  /** The object applied, the patch sent; none for delete. */
  body?: unknown;
  /** Server-side apply with force (takes fields from other managers). */
  force?: boolean;
  /** The subresource a patch wrote (status). */
  subresource?: string;
  /** The resourceVersion a status write produced (the caches get it when they settle it). */
  resourceVersion?: string;
}

interface Failure {
  verb?: WriteVerb;
  kind?: string;
  name?: string;
  code: 404 | 409 | 422;
}

/** Every write of every RecordingClient of this test process (the access test reads them all). */
export const everyWrite: Write[] = [];

/** A ModelClient that records every write and fails the ones it was told to. */
export class RecordingClient implements ModelClient {
  readonly writes: Write[] = [];
  /** Gives a write the resourceVersion it produces, as the API server would (the caches get it when they settle it). */
  resourceVersions?: () => string;
  /** Whether the cluster holds an object of this kind and name that this client did not write (applyForVersion's `created`). */
  exists?: (kind: ResourceKind, name: string) => boolean;
  /** The objects this client applied or created and has not deleted since, by kind and name. */
  readonly #stored = new Set<string>();
  readonly #failures: Failure[] = [];

  /** The next write matching `match` fails with `code` (delete of a missing object answers false, as KubeClient's does). */
  failNext(match: Omit<Failure, "code">, code: Failure["code"]): void {
    this.#failures.push({ ...match, code });
  }

  async apply<T extends KubeObject = KubeObject>(kind: ResourceKind, obj: T, opts: ApplyOptions): Promise<T> {
    return this.#applied("apply", kind, obj, opts);
  }

  /** Recorded as an apply: the same write, its answer unread. */
  async applyDiscardingAnswer(kind: ResourceKind, obj: KubeObject, opts: ApplyOptions): Promise<void> {
    this.#applied("apply", kind, obj, opts);
  }

  /**
   * Recorded as an apply; answers as the API server would: created when no such object existed
   * (neither one this client wrote nor one `exists` knows), with the uid and the
   * resourceVersion the write produced.
   */
  async applyForVersion(kind: ResourceKind, obj: KubeObject, opts: ApplyOptions): Promise<AppliedVersion> {
    const created = !this.#stored.has(storedKey(kind, obj)) && !this.exists?.(kind, obj.metadata.name!);
    const stored = this.#applied("apply", kind, obj, opts);
    return {
      created,
      uid: stored.metadata.uid,
      ...(stored.metadata.resourceVersion ? { resourceVersion: stored.metadata.resourceVersion } : {}),
    };
  }

  async applyStatus<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    obj: T,
    opts: ApplyOptions,
  ): Promise<T> {
    return this.#applied("applyStatus", kind, obj, opts);
  }

  /**
   * Server-side apply answers with the object as stored: here, as sent, with the uid the server
   * gives it and the resourceVersion the write produced.
   */
  #applied<T extends KubeObject>(verb: WriteVerb, kind: ResourceKind, obj: T, opts: ApplyOptions): T {
    const resourceVersion = this.resourceVersions?.();
    this.#record({
      verb,
      kind,
      ...keyOf(obj),
      body: structuredClone(obj),
      force: Boolean(opts.force),
      ...(resourceVersion ? { resourceVersion } : {}),
    });
    if (verb === "apply") this.#stored.add(storedKey(kind, obj));
    const stored = withUid(kind, structuredClone(obj));
    if (resourceVersion) stored.metadata.resourceVersion = resourceVersion;
    return stored;
  }

  /** The lists the reconcile made (the only reads not from a cache), as "Kind selector" lines. */
  readonly lists: string[] = [];
  /** What a list finds: the World's objects of that kind, cached or not. */
  lister?: (kind: ResourceKind, opts: ListOptions) => KubeObject[];

  async list<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    opts: ListOptions = {},
  ): Promise<ListResult<T>> {
    this.lists.push(`${kind.kind} ${opts.labelSelector ?? ""}`.trim());
    return { items: (this.lister?.(kind, opts) ?? []) as T[], resourceVersion: "" };
  }

  /** Create answers as apply does, or 409 (AlreadyExists) when told to fail. */
  async create<T extends KubeObject = KubeObject>(kind: ResourceKind, obj: T): Promise<T> {
    this.#record({ verb: "create", kind, ...keyOf(obj), body: structuredClone(obj) });
    this.#stored.add(storedKey(kind, obj));
    return withUid(kind, structuredClone(obj));
  }

  async patch<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    patch: unknown,
    type: PatchType,
    opts: { subresource?: string } = {},
  ): Promise<T> {
    if (type !== "merge" || opts.subresource !== "status")
      throw new Error(`the operator only merge-patches status; got ${type} ${opts.subresource ?? ""}`);
    this.#record({
      verb: "patch",
      kind,
      ...key,
      body: structuredClone(patch),
      ...(opts.subresource ? { subresource: opts.subresource } : {}),
    });
    return {} as T;
  }

  async delete(kind: ResourceKind, key: ObjectKey, _opts?: DeleteOptions): Promise<boolean> {
    try {
      this.#record({ verb: "delete", kind, ...key });
      this.#stored.delete(storedKey(kind, key));
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return false;
      throw err;
    }
    return true;
  }

  #record(write: Write): void {
    this.writes.push(write);
    everyWrite.push(write);
    const i = this.#failures.findIndex(
      (f) =>
        (!f.verb || f.verb === write.verb) &&
        (!f.kind || f.kind === write.kind.kind) &&
        (!f.name || f.name === write.name),
    );
    if (i < 0) return;
    const [failure] = this.#failures.splice(i, 1);
    const reason = { 404: "NotFound", 409: "Conflict", 422: "Invalid" }[failure!.code];
    throw new ApiError(failure!.code, `${write.verb} ${write.kind.kind}/${write.name}: ${reason}`, {
      reason,
    });
  }
}

function storedKey(kind: ResourceKind, obj: KubeObject | ObjectKey): string {
  const key = "metadata" in obj ? obj.metadata : obj;
  return `${kindName(kind)}/${key.namespace ?? ""}/${key.name}`;
}

/** The uid the API server gives an object it stores: here, the same for the same kind and name. */
function withUid<T extends KubeObject>(kind: ResourceKind, obj: T): T {
  obj.metadata.uid ??= `uid-${kind.kind}-${obj.metadata.name}`;
  return obj;
}

function keyOf(obj: KubeObject): { namespace?: string; name: string } {
  return {
    ...(obj.metadata.namespace ? { namespace: obj.metadata.namespace } : {}),
    name: obj.metadata.name!,
  };
}

/**
 * The writes the operator's access table (its generated RBAC) does not allow, as
 * "verb kind[/subresource]": a status write (apply or merge patch) needs patch on the status
 * subresource.
 */
export function disallowedWrites(writes: readonly Write[]): string[] {
  const needs = {
    apply: ["create", "patch"],
    applyStatus: ["patch"],
    patch: ["patch"],
    delete: ["delete"],
    create: ["create"],
  };
  const out = new Set<string>();
  for (const w of writes) {
    const subresource = w.verb === "applyStatus" ? "status" : w.subresource;
    for (const verb of needs[w.verb]) {
      const allowed = operatorAccess.some(
        (a) =>
          kindName(a.kind) === kindName(w.kind) &&
          a.subresource === subresource &&
          a.verbs.includes(verb as never),
      );
      if (!allowed) out.add(`${verb} ${kindName(w.kind)}${subresource ? `/${subresource}` : ""}`);
    }
  }
  return [...out];
}

/** "apply Deployment/resnet": one write in a line, for comparing what a reconcile wrote. */
export function line(w: Write): string {
  return `${w.verb} ${w.kind.kind}/${w.name}`;
}

export interface RecordedEvent {
  type: EventType;
  reason: string;
  message: string;
}

export const namespace = "ml";

export function mlModel(spec: MLModelSpec, name = "resnet"): MLModel {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: { name, namespace, uid: `uid-${name}`, generation: 1 },
    spec,
  };
}

/** The serving revision (pod template hash) of a spec of "resnet" on TensorFlow Serving, as the operator computes it. */
export function revisionOf(spec: MLModelSpec): string {
  const model = mlModel(spec);
  const resolution = resolveRuntime(model, [], [tfServing]);
  assert.ok(resolution.ok);
  return servingPodTemplate(planModel(model, resolution.runtime)).revision;
}

/** A World with TensorFlow Serving, the MLModel "resnet" of `spec`, and `more`. */
export function modelWorld(spec: MLModelSpec, ...more: [ResourceKind, KubeObject][]): World {
  return new World([clusterServingRuntimeKind, tfServing], [mlModelKind, mlModel(spec)], ...more);
}

/** A cluster as the operator's caches see it, and everything the reconcile wrote to it. */
export class World {
  readonly client = new RecordingClient();
  readonly events: RecordedEvent[] = [];
  /** What the reconciles remember between them, as the controller keeps it. */
  readonly memory = new ModelMemory();
  readonly written = this.memory.written;
  readonly heldRollouts = this.memory.heldRollouts;
  readonly config: OperatorConfig = { downloaderImage: "registry.local/mlmodel:test" };
  /** Whether the cluster serves HTTPRoutes (the Gateway API CRDs are installed). */
  gatewayServed = false;
  /** The reconcile's client is wrapped by this, as the controller wraps it (wakes.ts); see settleEchoes. */
  own: OwnWrites | undefined;
  now = new Date("2026-01-01T00:00:00Z");
  /**
   * How far the clock moves after each reconcile: by default past countsSettleMs, as
   * between the steps of a real rollout, so each step's status is written; 0 to see two
   * reconciles within the same moment.
   */
  tickMs = countsSettleMs;
  /**
   * A reconcile that held back a change of counts (report.ts, countsSettleMs) and wrote nothing
   * else, or a new generation's first Deploying (held rollouts) whatever else it wrote, is
   * followed by the one the queue brings back when the time is up, as the controller would;
   * false to see the held-back reconcile alone.
   */
  followHeldCounts = true;
  readonly #stores = new Map<string, MemoryStore>();
  #resourceVersion = 100;
  #settled = 0;
  #reported = 0;

  /** Objects of the cluster that their kind's cache does not select (download pods): listed, never cached. */
  readonly #uncached = new Map<string, MemoryStore>();

  constructor(...objects: [ResourceKind, KubeObject][]) {
    for (const [kind, obj] of objects) this.put(kind, obj);
    this.client.resourceVersions = () => String(++this.#resourceVersion);
    this.client.exists = (kind, name) => this.get(kind, name) !== undefined;
    this.client.lister = (kind, opts) =>
      [...this.store(kind).list(opts.namespace), ...this.#uncachedStore(kind).list(opts.namespace)]
        .filter((o) => selects(opts.labelSelector, o.metadata.labels))
        .map((o) => structuredClone(o) as KubeObject);
  }

  #uncachedStore(kind: ResourceKind): MemoryStore {
    const key = kindName(kind);
    let store = this.#uncached.get(key);
    if (!store) {
      store = new MemoryStore();
      this.#uncached.set(key, store);
    }
    return store;
  }

  store(kind: ResourceKind): MemoryStore {
    const key = kindName(kind);
    let store = this.#stores.get(key);
    if (!store) {
      const declared = modelCaches.find((c) => kindName(c.kind) === key);
      store = new MemoryStore(declared?.options.indexes ?? {});
      this.#stores.set(key, store);
    }
    return store;
  }

  /** Stores an object as an informer would: through the cache's transform, with a new resourceVersion (or the one given). */
  put(kind: ResourceKind, obj: KubeObject, resourceVersion?: string): void {
    const declared = modelCaches.find((c) => kindName(c.kind) === kindName(kind))?.options;
    const stored = withUid(kind, structuredClone(obj));
    stored.metadata.namespace ??= namespace;
    stored.metadata.resourceVersion = resourceVersion ?? String(++this.#resourceVersion);
    if (!selects(declared?.labelSelector, stored.metadata.labels)) {
      this.#uncachedStore(kind).apply(stored);
      return;
    }
    this.store(kind).apply(declared?.transform ? (declared.transform(stored) as KubeObject) : stored);
  }

  /** Every object of `kind` in the cluster, cached or not (pods: only a canary's are cached). */
  list(kind: ResourceKind): readonly Readonly<KubeObject>[] {
    return [...this.store(kind).list(), ...this.#uncachedStore(kind).list()];
  }

  get<T extends KubeObject = KubeObject>(kind: ResourceKind, name: string): T | undefined {
    const key = { namespace, name };
    const obj = this.store(kind).get(key) ?? this.#uncachedStore(kind).get(key);
    return obj ? (structuredClone(obj) as T) : undefined;
  }

  /** Changes a stored object (a copy: cached objects are frozen). */
  update<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    name: string,
    change: (obj: T) => void,
  ): void {
    const obj = this.get<T>(kind, name);
    if (!obj) throw new Error(`no ${kind.kind} ${name} in the test world`);
    change(obj);
    this.put(kind, obj);
  }

  remove(kind: ResourceKind, name: string): void {
    for (const store of [this.store(kind), this.#uncachedStore(kind)]) {
      const obj = store.get({ namespace, name });
      if (obj) store.delete(obj as KubeObject);
    }
  }

  context(name = "resnet"): MLModelContext {
    return {
      request: { namespace, name },
      signal: new AbortController().signal,
      log: silentLogger,
      client: this.own ? this.own.client(this.client) : this.client,
      cache: <T extends KubeObject>(kind: ResourceKind) => this.store(kind) as unknown as Store<T>,
      served: (kind: ResourceKind) => kindName(kind) !== kindName(httpRouteKind) || this.gatewayServed,
      recorder: { event: (_obj, type, reason, message) => this.events.push({ type, reason, message }) },
    };
  }

  /** One reconcile of the model; the writes it made, as lines. */
  async reconcile(name = "resnet"): Promise<{ result: ReconcileResult | undefined; writes: string[] }> {
    const once = () =>
      reconcileMLModel(this.context(name), {
        ...this.config,
        now: () => this.now,
        memory: this.memory,
      });
    const before = this.client.writes.length;
    let result = await once();
    const key = `${namespace}/${name}`;
    const countsHeld = this.written.get(key)?.countsSince !== undefined;
    const quiet = this.client.writes.length === before;
    const held = (countsHeld && quiet) || this.heldRollouts.has(key);
    if (this.followHeldCounts && held && result?.requeueAfterMs !== undefined) {
      // By then the caches have shown what this reconcile wrote.
      if (!quiet) this.settle();
      this.now = new Date(this.now.getTime() + result.requeueAfterMs);
      result = await once();
    }
    this.now = new Date(this.now.getTime() + this.tickMs);
    return { result, writes: this.newWrites().map(line) };
  }

  /** The writes since the last call (or since the start). */
  newWrites(): Write[] {
    const writes = this.client.writes.slice(this.#reported);
    this.#reported = this.client.writes.length;
    return writes;
  }

  /**
   * The caches catch up with every write made so far (or with the next `count` of them only, a
   * cache that lags): applied objects stored, deleted ones gone.
   */
  settle(count?: number): void {
    const end = count === undefined ? this.client.writes.length : this.#settled + count;
    for (const w of this.client.writes.slice(this.#settled, end)) {
      if (w.verb === "delete") this.remove(w.kind, w.name);
      else if (w.verb === "apply" || w.verb === "create") {
        const before = this.get(w.kind, w.name);
        const after = { ...(w.body as KubeObject), ...statusOf(before) };
        if (w.kind.kind === "Deployment")
          after.metadata = { ...after.metadata, generation: generationAfter(before, after) };
        this.put(w.kind, after, w.resourceVersion);
      } else {
        const patch = (w.body as { status?: Record<string, unknown> }).status ?? {};
        const m = this.get<MLModel>(mlModelKind, w.name);
        if (!m) throw new Error(`no MLModel ${w.name} in the test world`);
        m.status =
          w.verb === "applyStatus"
            ? (patch as MLModel["status"])
            : (mergePatch(m.status ?? {}, patch) as MLModel["status"]);
        this.put(mlModelKind, m, w.resourceVersion);
      }
    }
    this.#settled = Math.min(end, this.client.writes.length);
  }

  /**
   * The caches catch up with the writes not seen yet, one at a time as the watches bring them;
   * returns those of the kinds the controller owns whose watch event still wakes the model
   * (OwnWrites' predicate: `own`'s creates are not among them).
   */
  settleEchoes(): string[] {
    const own = this.own;
    if (!own) throw new Error("settleEchoes needs world.own");
    const woken: string[] = [];
    for (const w of this.client.writes.slice(this.#settled)) {
      const before = this.store(w.kind).get({ namespace, name: w.name });
      this.settle(1);
      const after = this.store(w.kind).get({ namespace, name: w.name });
      if (!ownedKinds.has(w.kind.kind) || w.verb === "applyStatus") continue;
      const change: StoreChange | undefined = !after
        ? before && { type: "delete", object: before, initial: false }
        : before
          ? { type: "update", object: after, old: before, initial: false }
          : { type: "add", object: after, initial: false };
      if (change && own.predicate(w.kind)(change)) woken.push(line(w));
    }
    return woken;
  }

  /** The last status the reconcile wrote for the model. */
  lastStatus(name = "resnet"): MLModel["status"] {
    const w = this.client.writes.findLast((x) => x.verb === "applyStatus" && x.name === name);
    return (w?.body as MLModel | undefined)?.status;
  }
}

/** The kinds the MLModel controller owns (controller.ts): their echoes go through OwnWrites' predicate. */
const ownedKinds = new Set([
  "Deployment",
  "Service",
  "Job",
  "PersistentVolumeClaim",
  "HorizontalPodAutoscaler",
  "PodDisruptionBudget",
  "ControllerRevision",
  "HTTPRoute",
]);

/**
 * A Deployment's generation after a write, as the API server keeps it: 1 when created, one
 * more for each change of its spec (status reads it: serving-pods.ts, deploymentSettled).
 */
function generationAfter(before: KubeObject | undefined, after: KubeObject): number {
  if (!before) return 1;
  const generation = before.metadata.generation ?? 1;
  const spec = (o: KubeObject) => JSON.stringify((o as { spec?: unknown }).spec);
  return spec(before) === spec(after) ? generation : generation + 1;
}

function statusOf(obj: KubeObject | undefined): { status?: unknown } {
  const status = (obj as { status?: unknown } | undefined)?.status;
  return status === undefined ? {} : { status };
}

/** RFC 7386 JSON merge patch: null removes a field. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    target && typeof target === "object" && !Array.isArray(target) ? { ...(target as object) } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

const silentLogger = pino({ level: "silent" });

/**
 * Whether a label selector of the forms the operator sends (`k`, `k=v`, `k!=v`, joined by
 * commas: every term must hold) selects these labels; no selector selects everything.
 */
export function selects(
  selector: string | undefined,
  labels: Readonly<Record<string, string>> = {},
): boolean {
  if (!selector) return true;
  return selector.split(",").every((term) => {
    const unequal = /^([^!=]+)!=(.*)$/.exec(term);
    if (unequal) return labels[unequal[1]!] !== unequal[2];
    const equal = /^([^!=]+)==?(.*)$/.exec(term);
    if (equal) return labels[equal[1]!] === equal[2];
    return term in labels;
  });
}
