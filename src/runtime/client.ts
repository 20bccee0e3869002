/**
 * KubeClient: the few REST verbs a controller needs, over Node's http/https (transport.ts).
 *
 * Auth and TLS come from a Connection: the runtime's own kubeconfig loader (kubeconfig.ts:
 * tokens, token files, client certificates, exec plugins, in-cluster service account), or
 * client-node's KubeConfig through `fromKubeConfig` (kubeConfigConnection). Headers are asked for before every
 * request (tokens rotate: token files are re-read, exec credentials expire).
 *
 * Every request is counted by verb and HTTP code through `onRequest` listeners (metrics).
 * There is no client-side rate limit: like controller-runtime since v0.21 we rely on the
 * server's priority and fairness and honour 429 Retry-After where we retry (watcher, queue).
 */
import type { RequestOptions } from "node:https";
import type { KubeConfig } from "@kubernetes/client-node";
import { ApiError } from "./errors.ts";
import { apiVersionOf, collectionPath, kindName, objectPath, type ResourceKind } from "./kinds.ts";
import { eventWithoutManagedFields, listWithoutManagedFields, skipString } from "./managed-fields.ts";
import { type HttpRequest, type HttpResponse, NodeTransport, type TlsSettings } from "./transport.ts";
import type { KubeObject, ObjectKey, Status, WatchEvent } from "./types.ts";

export type Verb = "get" | "list" | "watch" | "create" | "update" | "patch" | "apply" | "delete";

/** One finished request: `code` is 0 when no HTTP answer came (network error, abort). */
export interface RequestRecord {
  verb: Verb;
  method: string;
  code: number;
}

export interface ListOptions {
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  continue?: string;
  resourceVersion?: string;
  signal?: AbortSignal;
  /**
   * Leave out every object's metadata.managedFields, cut from the text before it is parsed
   * (managed-fields.ts): for caches, which drop them anyway, and save parsing them.
   */
  withoutManagedFields?: boolean;
  /**
   * The Accept header (default application/json): e.g. metadata-only.ts asks for
   * PartialObjectMetadata, the objects' metadata without their contents.
   */
  accept?: string;
}

export interface ListResult<T> {
  items: T[];
  resourceVersion: string;
  continue?: string;
}

export interface WatchOptions {
  namespace?: string;
  resourceVersion?: string;
  allowWatchBookmarks?: boolean;
  labelSelector?: string;
  fieldSelector?: string;
  /** Asks the server to end the watch after this long (it picks a random default otherwise). */
  timeoutSeconds?: number;
  /**
   * Ends the watch with a WatchInactivityError when no bytes arrive for this long. Not a
   * whole-request timeout: a busy watch lives as long as the server keeps it. Bookmarks keep an
   * idle but healthy watch alive; a half-open connection stops sending them.
   */
  inactivityTimeoutMs?: number;
  /** Told once the server accepted the watch (HTTP 200), before any event arrives. */
  onOpen?: () => void;
  /**
   * Leave out every object's metadata.managedFields, cut from the text before it is parsed
   * (managed-fields.ts): for caches, which drop them anyway, and save parsing them.
   */
  withoutManagedFields?: boolean;
  /**
   * The Accept header (default application/json): e.g. metadata-only.ts asks for
   * PartialObjectMetadata, the objects' metadata without their contents.
   */
  accept?: string;
}

export interface ApplyOptions {
  fieldManager: string;
  force?: boolean;
  signal?: AbortSignal;
}

/** What applyForVersion reads of its answer. */
export interface AppliedVersion {
  /** The apply created the object (HTTP 201): the object at `resourceVersion` is this write's alone. */
  created: boolean;
  uid?: string | undefined;
  resourceVersion?: string | undefined;
}

export type PatchType = "merge" | "json" | "strategic" | "apply";

export interface DeleteOptions {
  propagationPolicy?: "Foreground" | "Background" | "Orphan";
  preconditions?: { uid?: string; resourceVersion?: string };
  gracePeriodSeconds?: number;
  signal?: AbortSignal;
}

/** What a request carries besides its verb, method and path. */
interface RequestParts {
  query?: URLSearchParams;
  body?: string;
  contentType?: string;
  accept?: string | undefined;
  signal?: AbortSignal | undefined;
}

/** Thrown by a watch that received nothing for `inactivityTimeoutMs`. */
export class WatchInactivityError extends Error {
  constructor(ms: number) {
    super(`watch received nothing for ${ms} ms; treating the connection as dead`);
    this.name = "WatchInactivityError";
  }
}

const PATCH_CONTENT_TYPES: Record<PatchType, string> = {
  merge: "application/merge-patch+json",
  json: "application/json-patch+json",
  strategic: "application/strategic-merge-patch+json",
  apply: "application/apply-patch+yaml",
};

/** What KubeClient needs from the connection: base URL, TLS settings, fresh headers. */
export interface Connection {
  server: string;
  /**
   * CA, client certificate, SNI name and verification for an https server. Read before every
   * request (it may be a getter): a different object opens a new connection pool.
   */
  tls?: TlsSettings;
  headers(): Promise<Record<string, string>>;
}

export interface KubeClientOptions {
  userAgent?: string;
}

export class KubeClient {
  readonly #conn: Connection;
  readonly #server: string;
  readonly #userAgent: string;
  readonly #listeners: ((r: RequestRecord) => void)[] = [];
  readonly #transport: NodeTransport;

  constructor(conn: Connection, opts: KubeClientOptions = {}) {
    if (!/^https?:\/\//.test(conn.server)) {
      throw new TypeError(`KubeClient server "${conn.server}" must be an http(s):// URL`);
    }
    // Keep `conn` itself: its tls may be a getter filled on the first request.
    this.#conn = conn;
    this.#server = conn.server.replace(/\/+$/, "");
    this.#userAgent = opts.userAgent ?? "mlmodel-runtime";
    this.#transport = new NodeTransport(conn.server);
  }

  /** Builds a client from a loaded KubeConfig (current context): see kubeConfigConnection. */
  static fromKubeConfig(kc: KubeConfig, opts: KubeClientOptions = {}): KubeClient {
    return new KubeClient(kubeConfigConnection(kc), opts);
  }

  /** Calls `fn` after every request, with its verb and HTTP code (0: no answer). */
  onRequest(fn: (r: RequestRecord) => void): void {
    this.#listeners.push(fn);
  }

  async get<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    opts: { signal?: AbortSignal; subresource?: string } = {},
  ): Promise<T | undefined> {
    try {
      return (await this.#json("get", "GET", objectPath(kind, key, opts.subresource), opts)) as T;
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return undefined;
      throw err;
    }
  }

  /**
   * A subresource that answers in plain text, not JSON (a pod's `log`): its body, or undefined
   * when the object does not exist (404).
   */
  async getText(
    kind: ResourceKind,
    key: ObjectKey,
    opts: { subresource: string; query?: Record<string, string | number | undefined>; signal?: AbortSignal },
  ): Promise<string | undefined> {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(opts.query ?? {})) setParam(query, name, value);
    try {
      const res = await this.#send("get", "GET", objectPath(kind, key, opts.subresource), {
        query,
        signal: opts.signal,
      });
      return await res.text();
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return undefined;
      throw err;
    }
  }

  /**
   * Discovery of one API group version: the resources it serves, or undefined when the API
   * server does not serve it (404: e.g. its CRD is not installed). Open to every authenticated
   * user (the system:discovery role), so it needs no RBAC rule of its own.
   */
  async apiResources(
    group: string,
    version: string,
    opts: { signal?: AbortSignal } = {},
  ): Promise<{ name: string; kind: string; namespaced: boolean }[] | undefined> {
    const path = group
      ? `/apis/${encodeURIComponent(group)}/${encodeURIComponent(version)}`
      : `/api/${version}`;
    try {
      const list = (await this.#json("get", "GET", path, opts)) as {
        resources?: { name: string; kind: string; namespaced: boolean }[];
      };
      return list?.resources ?? [];
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return undefined;
      throw err;
    }
  }

  async list<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    opts: ListOptions = {},
  ): Promise<ListResult<T>> {
    const query = new URLSearchParams();
    setParam(query, "labelSelector", opts.labelSelector);
    setParam(query, "fieldSelector", opts.fieldSelector);
    setParam(query, "limit", opts.limit);
    setParam(query, "continue", opts.continue);
    setParam(query, "resourceVersion", opts.resourceVersion);
    const body = (await this.#request(
      "list",
      "GET",
      collectionPath(kind, opts.namespace),
      { query, signal: opts.signal, accept: opts.accept },
      opts.withoutManagedFields ? listWithoutManagedFields : asIs,
    )) as {
      items?: T[];
      metadata?: { resourceVersion?: string; continue?: string };
    };
    const items = body.items ?? [];
    // Lists drop apiVersion/kind from items; put them back so items look like watched objects.
    for (const item of items) {
      item.apiVersion ??= apiVersionOf(kind);
      item.kind ??= kind.kind;
    }
    const result: ListResult<T> = { items, resourceVersion: body.metadata?.resourceVersion ?? "" };
    if (body.metadata?.continue) result.continue = body.metadata.continue;
    return result;
  }

  async create<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    obj: T,
    opts: { fieldManager?: string; signal?: AbortSignal } = {},
  ): Promise<T> {
    const query = new URLSearchParams();
    setParam(query, "fieldManager", opts.fieldManager);
    const ns = kind.namespaced ? requireNamespace(kind, obj) : undefined;
    return (await this.#json("create", "POST", collectionPath(kind, ns), {
      query,
      body: JSON.stringify(withTypeMeta(kind, obj)),
      ...opts,
    })) as T;
  }

  /** PUT: replaces the object; fails with 409 when metadata.resourceVersion is stale. */
  async replace<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    obj: T,
    opts: { fieldManager?: string; subresource?: string; signal?: AbortSignal } = {},
  ): Promise<T> {
    const query = new URLSearchParams();
    setParam(query, "fieldManager", opts.fieldManager);
    return (await this.#json("update", "PUT", objectPath(kind, keyOf(kind, obj), opts.subresource), {
      query,
      body: JSON.stringify(withTypeMeta(kind, obj)),
      ...opts,
    })) as T;
  }

  /** Server-side apply: the server merges `obj` as owned by `fieldManager`. */
  apply<T extends KubeObject = KubeObject>(kind: ResourceKind, obj: T, opts: ApplyOptions): Promise<T> {
    return this.#apply(kind, obj, opts, undefined, false) as Promise<T>;
  }

  /**
   * Server-side apply whose answer is not wanted: the body of a success is read to its end and
   * dropped, never parsed (an error's body is parsed for its message as always). For writers
   * that ignore the stored object (a child applied when it drifted): a Deployment's answer,
   * with its managedFields and status, is several KiB of JSON to parse and collect.
   */
  async applyDiscardingAnswer(kind: ResourceKind, obj: KubeObject, opts: ApplyOptions): Promise<void> {
    await this.#apply(kind, obj, opts, undefined, true);
  }

  /**
   * Server-side apply that reads of its answer only whether it created the object (HTTP 201)
   * and the stored object's uid and resourceVersion, from the first members of its metadata
   * (answerMeta), without parsing the rest: for a writer that wants to recognise the watch
   * event its own write causes (its echo) but not the object.
   */
  async applyForVersion(kind: ResourceKind, obj: KubeObject, opts: ApplyOptions): Promise<AppliedVersion> {
    const { verb, path, request } = patchRequest(kind, keyOf(kind, obj), withTypeMeta(kind, obj), "apply", {
      ...opts,
      fieldManager: requireFieldManager(kind, opts),
    });
    const res = await this.#send(verb, "PATCH", path, request);
    return { created: res.status === 201, ...answerMeta(await res.text()) };
  }

  /** Server-side apply on the status subresource (only `status` of `obj` is taken). */
  applyStatus<T extends KubeObject = KubeObject>(kind: ResourceKind, obj: T, opts: ApplyOptions): Promise<T> {
    return this.#apply(kind, obj, opts, "status", false) as Promise<T>;
  }

  async patch<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    key: ObjectKey,
    patch: unknown,
    type: PatchType,
    opts: { subresource?: string; fieldManager?: string; force?: boolean; signal?: AbortSignal } = {},
  ): Promise<T> {
    return (await this.#patch(kind, key, patch, type, opts, false)) as T;
  }

  /** Deletes; resolves false if the object was already gone (404). */
  async delete(kind: ResourceKind, key: ObjectKey, opts: DeleteOptions = {}): Promise<boolean> {
    const body: Record<string, unknown> = { apiVersion: "v1", kind: "DeleteOptions" };
    if (opts.propagationPolicy) body["propagationPolicy"] = opts.propagationPolicy;
    if (opts.preconditions) body["preconditions"] = opts.preconditions;
    if (opts.gracePeriodSeconds !== undefined) body["gracePeriodSeconds"] = opts.gracePeriodSeconds;
    try {
      // The answer (the object as deleted, or a Status) is not read: drained, not parsed.
      await this.#request(
        "delete",
        "DELETE",
        objectPath(kind, key),
        { body: JSON.stringify(body), ...opts },
        "discard",
      );
      return true;
    } catch (err) {
      if (err instanceof ApiError && err.code === 404) return false;
      throw err;
    }
  }

  /**
   * One watch request as an async iterable of raw events. Ends when the server ends the
   * stream. Throws ApiError for an HTTP error or an ERROR event (e.g. 410 Gone when the
   * resourceVersion is too old), WatchInactivityError when the connection went silent.
   * Breaking out of the loop or aborting `signal` closes the connection.
   */
  async *watch<T extends KubeObject = KubeObject>(
    kind: ResourceKind,
    opts: WatchOptions = {},
    signal?: AbortSignal,
  ): AsyncGenerator<WatchEvent<T>> {
    const query = new URLSearchParams({ watch: "true" });
    setParam(query, "resourceVersion", opts.resourceVersion);
    if (opts.allowWatchBookmarks) query.set("allowWatchBookmarks", "true");
    setParam(query, "labelSelector", opts.labelSelector);
    setParam(query, "fieldSelector", opts.fieldSelector);
    setParam(query, "timeoutSeconds", opts.timeoutSeconds);
    const local = new AbortController();
    const onAbort = () => local.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const inactivity = new InactivityTimer(opts.inactivityTimeoutMs, () =>
      local.abort(new WatchInactivityError(opts.inactivityTimeoutMs ?? 0)),
    );
    try {
      const res = await this.#send("watch", "GET", collectionPath(kind, opts.namespace), {
        query,
        signal: local.signal,
        accept: opts.accept,
      });
      inactivity.touch();
      opts.onOpen?.();
      // Lines are split here, not by another async generator: a layer less of promises for
      // every event.
      const split = new LineSplitter();
      const before = opts.withoutManagedFields ? eventWithoutManagedFields : asIs;
      for await (const chunk of res.body) {
        inactivity.touch();
        for (const line of split.push(chunk)) yield watchEvent<T>(before(line), kind, opts.namespace);
      }
      const last = split.end();
      if (last !== undefined) yield watchEvent<T>(before(last), kind, opts.namespace);
    } catch (err) {
      // An abort by the inactivity timer surfaces as the fetch's AbortError; report its reason.
      if (local.signal.aborted && local.signal.reason instanceof WatchInactivityError)
        throw local.signal.reason;
      throw err;
    } finally {
      inactivity.stop();
      signal?.removeEventListener("abort", onAbort);
      local.abort();
    }
  }

  #apply(
    kind: ResourceKind,
    obj: KubeObject,
    opts: ApplyOptions,
    subresource: string | undefined,
    discard: boolean,
  ): Promise<unknown> {
    const patchOpts: { subresource?: string; fieldManager: string; force?: boolean; signal?: AbortSignal } = {
      fieldManager: requireFieldManager(kind, opts),
    };
    if (subresource) patchOpts.subresource = subresource;
    if (opts.force !== undefined) patchOpts.force = opts.force;
    if (opts.signal) patchOpts.signal = opts.signal;
    return this.#patch(kind, keyOf(kind, obj), withTypeMeta(kind, obj), "apply", patchOpts, discard);
  }

  #patch(
    kind: ResourceKind,
    key: ObjectKey,
    patch: unknown,
    type: PatchType,
    opts: { subresource?: string; fieldManager?: string; force?: boolean; signal?: AbortSignal },
    discard: boolean,
  ): Promise<unknown> {
    const { verb, path, request } = patchRequest(kind, key, patch, type, opts);
    return this.#request(verb, "PATCH", path, request, discard ? "discard" : asIs);
  }

  #json(
    verb: Verb,
    method: string,
    path: string,
    opts: { query?: URLSearchParams; body?: string; contentType?: string; signal?: AbortSignal | undefined },
  ): Promise<unknown> {
    return this.#request(verb, method, path, opts, asIs);
  }

  /**
   * One request: its answer parsed (after `before`, which may cut parts of the text), or with
   * "discard" read to the end and dropped (undefined).
   */
  async #request(
    verb: Verb,
    method: string,
    path: string,
    opts: RequestParts,
    before: ((text: string) => string) | "discard",
  ): Promise<unknown> {
    const res = await this.#send(verb, method, path, opts);
    if (before === "discard") return void (await res.discard());
    const text = await res.text();
    return text ? JSON.parse(before(text)) : undefined;
  }

  async #send(verb: Verb, method: string, path: string, opts: RequestParts): Promise<HttpResponse> {
    const qs = opts.query?.toString();
    const headers: Record<string, string> = {
      ...(await this.#conn.headers()),
      Accept: opts.accept ?? "application/json",
      "User-Agent": this.#userAgent,
    };
    if (opts.body !== undefined) headers["Content-Type"] = opts.contentType ?? "application/json";
    const req: HttpRequest = {
      method,
      url: `${this.#server}${path}${qs ? `?${qs}` : ""}`,
      headers,
      signal: opts.signal,
    };
    if (opts.body !== undefined) req.body = opts.body;
    let res: HttpResponse;
    try {
      res = await this.#transport.send(req, this.#conn.tls);
    } catch (err) {
      this.#record({ verb, method, code: 0 });
      throw err;
    }
    this.#record({ verb, method, code: res.status });
    if (res.status >= 200 && res.status < 300) return res;
    const text = await res.text();
    let status: Status;
    try {
      status = JSON.parse(text) as Status;
    } catch {
      status = { message: text.slice(0, 500) };
    }
    throw ApiError.fromStatus(status, res.status, {
      verb,
      path,
      retryAfter: res.header("retry-after") ?? null,
    });
  }

  #record(r: RequestRecord): void {
    for (const fn of this.#listeners) fn(r);
  }
}

/**
 * The connection of a KubeConfig's current context, with every credential client-node knows:
 * bearer tokens (also read from a token file, as in-cluster), client certificates, basic auth,
 * exec plugins and auth providers, impersonation. client-node is asked before every request,
 * since tokens rotate (it re-reads token files and re-runs exec plugins when their credential
 * expires). The TLS settings are taken from its first answer and again whenever the CA or
 * client certificate in an answer changes (an exec plugin may hand out short-lived
 * certificates; a mounted CA bundle may be replaced): a new settings object, so the transport
 * opens a new connection pool for it.
 */
export function kubeConfigConnection(kc: KubeConfig): Connection {
  const cluster = kc.getCurrentCluster();
  if (!cluster) {
    throw new TypeError(`kubeconfig has no current cluster (current-context "${kc.getCurrentContext()}")`);
  }
  const secure = cluster.server.startsWith("https:");
  let tls: TlsSettings | undefined;
  let identity = "";
  const headers = async (): Promise<Record<string, string>> => {
    const https: RequestOptions = {};
    await kc.applyToHTTPSOptions(https);
    if (secure) {
      const now = tlsIdentity(https);
      if (!tls || now !== identity) {
        tls = tlsSettings(https, cluster.tlsServerName);
        identity = now;
      }
    }
    const out: Record<string, string> = {};
    for (const [name, value] of Object.entries(https.headers ?? {})) {
      if (value !== undefined) out[name] = String(value);
    }
    if (typeof https.auth === "string" && !out["Authorization"]) {
      out["Authorization"] = `Basic ${Buffer.from(https.auth).toString("base64")}`;
    }
    return out;
  };
  return {
    server: cluster.server,
    headers,
    get tls() {
      return tls;
    },
  };
}

/** What the TLS settings are built from: a change means new settings (and a new pool). */
function tlsIdentity(https: RequestOptions): string {
  return [https.ca, https.cert, https.key, https.rejectUnauthorized].map((v) => String(v ?? "")).join("\0");
}

/** The TLS part of client-node's https options. */
function tlsSettings(https: RequestOptions, servername: string | undefined): TlsSettings {
  const tls: TlsSettings = {};
  if (https.ca) tls.ca = https.ca as string | Buffer;
  if (https.cert) tls.cert = https.cert as string | Buffer;
  if (https.key) tls.key = https.key as string | Buffer;
  if (https.rejectUnauthorized !== undefined) tls.rejectUnauthorized = https.rejectUnauthorized;
  if (servername) tls.servername = servername;
  return tls;
}

function requireFieldManager(kind: ResourceKind, opts: ApplyOptions | undefined): string {
  if (!opts?.fieldManager) {
    throw new TypeError(`apply of ${kindName(kind)} needs opts.fieldManager (e.g. "mlmodel-operator")`);
  }
  return opts.fieldManager;
}

/** A PATCH of `key`: its verb, path, query (field manager, force), body and content type. */
function patchRequest(
  kind: ResourceKind,
  key: ObjectKey,
  patch: unknown,
  type: PatchType,
  opts: { subresource?: string; fieldManager?: string; force?: boolean; signal?: AbortSignal | undefined },
): {
  verb: Verb;
  path: string;
  request: { query: URLSearchParams; body: string; contentType: string; signal?: AbortSignal | undefined };
} {
  const contentType = PATCH_CONTENT_TYPES[type];
  if (!contentType) {
    throw new TypeError(
      `patch type "${String(type)}" is not one of ${Object.keys(PATCH_CONTENT_TYPES).join(", ")}`,
    );
  }
  const query = new URLSearchParams();
  setParam(query, "fieldManager", opts.fieldManager);
  if (opts.force) query.set("force", "true");
  return {
    verb: type === "apply" ? "apply" : "patch",
    path: objectPath(kind, key, opts.subresource),
    request: { query, body: JSON.stringify(patch), contentType, signal: opts.signal },
  };
}

/**
 * metadata.uid and metadata.resourceVersion of an object as the API server writes it, read
 * from its first members only: the server writes `kind`, `apiVersion`, then `metadata`, whose
 * leading members are strings (name, generateName, namespace, selfLink, uid, resourceVersion)
 * before the first number or object (generation, labels...). The text is tokenized exactly
 * (strings with their escapes), so a value that merely contains `"resourceVersion"` is never
 * taken for it; anything else found before both (another order, another member) falls back to
 * JSON.parse of the whole text. A Deployment's answer of 3.2 KiB with managedFields: 1.5 us
 * here against 37 to 51 us for JSON.parse.
 */
export function answerMeta(text: string): { uid?: string; resourceVersion?: string } {
  const fast = scanMeta(text);
  if (fast) return fast;
  if (!text) return {};
  const metadata = (JSON.parse(text) as { metadata?: { uid?: string; resourceVersion?: string } }).metadata;
  return {
    ...(metadata?.uid !== undefined ? { uid: metadata.uid } : {}),
    ...(metadata?.resourceVersion !== undefined ? { resourceVersion: metadata.resourceVersion } : {}),
  };
}

/** answerMeta's fast path: undefined when the text is not laid out as expected. */
function scanMeta(text: string): { uid?: string; resourceVersion?: string } | undefined {
  let i = 0;
  let inMetadata = false;
  let uid: string | undefined;
  let resourceVersion: string | undefined;
  const skipSpace = () => {
    while (i < text.length && " \t\r\n".includes(text[i]!)) i++;
  };
  skipSpace();
  if (text[i] !== "{") return undefined;
  i++;
  for (;;) {
    skipSpace();
    if (text[i] !== '"') return undefined;
    const keyEnd = skipString(text, i);
    if (keyEnd < 0) return undefined;
    const key = text.slice(i + 1, keyEnd - 1);
    i = keyEnd;
    skipSpace();
    if (text[i] !== ":") return undefined;
    i++;
    skipSpace();
    if (!inMetadata && key === "metadata") {
      if (text[i] !== "{") return undefined;
      inMetadata = true;
      i++;
      continue;
    }
    if (text[i] !== '"') {
      // The first member that is not a string: metadata's strings are over.
      return inMetadata && resourceVersion !== undefined
        ? { ...(uid !== undefined ? { uid } : {}), resourceVersion }
        : undefined;
    }
    const valueEnd = skipString(text, i);
    if (valueEnd < 0) return undefined;
    if (inMetadata && (key === "uid" || key === "resourceVersion")) {
      const raw = text.slice(i + 1, valueEnd - 1);
      const value = raw.includes("\\") ? (JSON.parse(`"${raw}"`) as string) : raw;
      if (key === "uid") uid = value;
      else resourceVersion = value;
      if (uid !== undefined && resourceVersion !== undefined) return { uid, resourceVersion };
    }
    i = valueEnd;
    skipSpace();
    if (text[i] === ",") i++;
    else
      return inMetadata && resourceVersion !== undefined
        ? { ...(uid !== undefined ? { uid } : {}), resourceVersion }
        : undefined;
  }
}

function setParam(q: URLSearchParams, name: string, value: string | number | undefined): void {
  if (value !== undefined && value !== "") q.set(name, String(value));
}

function requireNamespace(kind: ResourceKind, obj: KubeObject): string {
  const ns = obj.metadata?.namespace;
  if (!ns) {
    throw new TypeError(
      `${kindName(kind)} "${obj.metadata?.name ?? obj.metadata?.generateName ?? "?"}" needs metadata.namespace (the kind is namespaced)`,
    );
  }
  return ns;
}

function keyOf(kind: ResourceKind, obj: KubeObject): ObjectKey {
  const name = obj.metadata?.name;
  if (!name) throw new TypeError(`${kindName(kind)} object needs metadata.name, got ${JSON.stringify(name)}`);
  return kind.namespaced ? { namespace: requireNamespace(kind, obj), name } : { name };
}

function withTypeMeta<T extends KubeObject>(kind: ResourceKind, obj: T): T {
  return { ...obj, apiVersion: obj.apiVersion ?? apiVersionOf(kind), kind: obj.kind ?? kind.kind };
}

/** A resettable one-shot timer; a no-op when `ms` is undefined or 0. */
class InactivityTimer {
  readonly #ms: number | undefined;
  readonly #onFire: () => void;
  #handle: ReturnType<typeof setTimeout> | undefined;

  constructor(ms: number | undefined, onFire: () => void) {
    this.#ms = ms;
    this.#onFire = onFire;
    this.touch();
  }

  touch(): void {
    if (!this.#ms) return;
    // refresh() moves the deadline without a new timer: touched for every chunk of a watch.
    if (this.#handle) this.#handle.refresh();
    else this.#handle = setTimeout(this.#onFire, this.#ms);
  }

  stop(): void {
    if (this.#handle) clearTimeout(this.#handle);
    this.#handle = undefined;
  }
}

/** One line of a watch stream as its event; an ERROR event is thrown as the ApiError it carries. */
function watchEvent<T extends KubeObject>(
  line: string,
  kind: ResourceKind,
  namespace: string | undefined,
): WatchEvent<T> {
  const event = JSON.parse(line) as { type: string; object: unknown };
  if (event.type === "ERROR") {
    const status = event.object as Status;
    throw ApiError.fromStatus(status, status.code ?? 500, {
      verb: "watch",
      path: collectionPath(kind, namespace),
    });
  }
  return event as WatchEvent<T>;
}

const asIs = (text: string): string => text;

const streaming = { stream: true };

/**
 * Splits a byte stream into non-empty, trimmed text lines, chunk by chunk: a line cut between
 * chunks (or a character cut between its bytes) is held until the rest arrives.
 */
export class LineSplitter {
  readonly #decoder = new TextDecoder();
  #held = "";

  /** The lines this chunk completes. */
  push(chunk: Uint8Array): string[] {
    const text = this.#held + this.#decoder.decode(chunk, streaming);
    const out: string[] = [];
    let start = 0;
    for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n", start)) {
      const line = text.slice(start, nl).trim();
      if (line) out.push(line);
      start = nl + 1;
    }
    this.#held = start === 0 ? text : text.slice(start);
    return out;
  }

  /** What is left once the stream ended, when it is not blank. */
  end(): string | undefined {
    const rest = (this.#held + this.#decoder.decode()).trim();
    this.#held = "";
    return rest || undefined;
  }
}
