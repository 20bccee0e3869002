/**
 * Manager: owns the client, the shared caches, the controllers, leader election, metrics,
 * probes and shutdown. Lifecycle of start(signal):
 *
 *   serve /metrics, /healthz, /readyz ─▶ run caches ─▶ wait for sync (readyz turns 200)
 *     ─▶ [leader election: wait to lead] ─▶ start controllers
 *   on signal: drain controllers (deadline) ─▶ flush events ─▶ release lease ─▶ stop caches
 *     ─▶ close servers ─▶ resolve
 *   on lost lease: abort reconciles at once, clean up as above, then reject with
 *     LeaderElectionLostError (the process should exit; a fresh start campaigns again).
 *
 * Caches run even without leadership (as in controller-runtime) so a standby is warm; their
 * watchers share one Reachability, so the first answer after an outage wakes them all.
 * /readyz also fails while any cache's list/watch has kept failing for healthGracePeriodMs
 * (an API server outage); /healthz never does (a restart would not bring the API back).
 */
import { createRequire } from "node:module";
import { hostname } from "node:os";
import type { KubeConfig } from "@kubernetes/client-node";
import pino, { type Logger } from "pino";
import { KubeClient } from "./client.ts";
import { type Clock, realClock } from "./clock.ts";
import { Controller, ControllerBuilder, type ControllerOptions } from "./controller.ts";
import { type EventRecorder, KubeEventRecorder } from "./events.ts";
import { watchHealthCheck } from "./health.ts";
import { HeapReclaimer, type HeapReclaimOptions } from "./heap-reclaim.ts";
import { Informer, type Transform } from "./informer.ts";
import type { ResourceKind } from "./kinds.ts";
import { kindName, validateKind } from "./kinds.ts";
import { kubeConnection, loadKubeConfig } from "./kubeconfig.ts";
import { type Acquisition, kubeLeaseClient, type LeaderElectionOptions, LeaderElector } from "./leader.ts";
import { metadataOnlySource } from "./metadata-only.ts";
import { RuntimeMetrics } from "./metrics.ts";
import { OptionalInformer } from "./optional-informer.ts";
import { Reachability } from "./reachability.ts";
import { closeServer, parseBindAddress, probe, serve } from "./server.ts";
import { type IndexFunc, MultiStore, type Store } from "./store.ts";
import { isDnsLabel, type KubeObject } from "./types.ts";
import { watchErrorLog } from "./watcher.ts";

export interface ManagerOptions {
  /**
   * client-node's KubeConfig. Default: the runtime's own loader (kubeconfig.ts) reads
   * $KUBECONFIG / ~/.kube/config / in-cluster, and client-node is never imported.
   */
  kubeConfig?: KubeConfig;
  /** Use this client instead of building one from kubeConfig. */
  client?: KubeClient;
  /** Restrict namespaced caches to these namespaces (default: all). */
  namespaces?: string[];
  leaderElection?: LeaderElectionOptions;
  /** "host:port", ":port", or "0" to disable. Default "0". */
  metricsBindAddress?: string;
  /** "host:port", ":port", or "0" to disable. Default "0". */
  healthProbeBindAddress?: string;
  logger?: Logger;
  /** How long in-flight reconciles may take to finish on shutdown (default 30 s). */
  shutdownTimeoutMs?: number;
  /** events.k8s.io reportingController (default "mlmodel-runtime"). */
  reportingController?: string;
  clock?: Clock;
  /** Default transform for all caches (default: strip managedFields). */
  transform?: Transform;
  /** Watch tuning passed to every cache (tests shorten timeouts). */
  watcher?: { watchTimeoutSeconds?: number; inactivityTimeoutMs?: number };
  /**
   * How long a cache's list/watch may keep failing (no answer from the API server between the
   * errors) before `/readyz` fails naming it (default 10 s; Infinity: never). See docs/runtime.md.
   */
  healthGracePeriodMs?: number;
  /** How often an optional cache asks discovery whether its kind is served (default 30 s). */
  servedPollIntervalMs?: number;
  /**
   * Give back the heap a burst grew, with one compacting collection once the controllers are
   * quiet (HeapReclaimer). Default off: it collects in the whole process, the application's
   * call. See docs/runtime.md.
   */
  reclaimHeapWhenQuiet?: boolean | HeapReclaimOptions;
}

export interface CacheOptions<T extends KubeObject = KubeObject> {
  indexes?: Record<string, IndexFunc<T>>;
  labelSelector?: string;
  transform?: Transform<T>;
  /** Cached objects keep metadata.managedFields (default false; see InformerOptions). */
  keepManagedFields?: boolean;
  /**
   * The kind may not be served (a CRD that may be missing, installed later or removed): watch
   * it only while it is (OptionalInformer). The cache is empty meanwhile and `served(kind)`
   * says false; controllers with such a source reconcile all their objects when it changes.
   */
  optional?: boolean;
  /**
   * Lists and watches metadata only (metadata-only.ts): the objects' contents (a Secret's
   * values) never reach the process. Not with `optional`.
   */
  metadataOnly?: boolean;
}

export class LeaderElectionLostError extends Error {
  constructor(identity: string) {
    super(`leader election lost by ${identity}; stopping so a fresh process can campaign again`);
    this.name = "LeaderElectionLostError";
  }
}

type CacheInformer = Informer | OptionalInformer;

interface CacheEntry {
  kind: ResourceKind;
  informers: CacheInformer[];
  store: Store;
  optional: boolean;
  /** As registered: a later registration asking for another one would be silently ignored. */
  transform: Transform | undefined;
  labelSelector: string | undefined;
  keepManagedFields: boolean | undefined;
  metadataOnly: boolean | undefined;
}

export class Manager {
  readonly client: KubeClient;
  readonly log: Logger;
  readonly metrics: RuntimeMetrics;
  readonly recorder: EventRecorder & { flush(): Promise<void> };
  /**
   * Shared by every cache's watcher: when one hears from the API server after an outage, the
   * others stop waiting out their connection failures and reconnect at once.
   */
  readonly reachability: Reachability;
  readonly #opts: ManagerOptions;
  readonly #clock: Clock;
  readonly #caches = new Map<string, CacheEntry>();
  readonly #controllers: Controller[] = [];
  #cacheChanges = 0;
  #elector: LeaderElector | undefined;
  #started = false;
  #addresses: { metrics?: string; health?: string } = {};

  constructor(opts: ManagerOptions = {}) {
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
    this.log = opts.logger ?? pino({ level: process.env["LOG_LEVEL"] ?? "info" });
    this.metrics = new RuntimeMetrics();
    this.reachability = new Reachability({
      onWake: (woken) =>
        this.log.info(
          { woken },
          "API server answered again; caches waiting out a connection failure retry now",
        ),
    });
    this.client =
      opts.client ??
      (opts.kubeConfig
        ? KubeClient.fromKubeConfig(opts.kubeConfig)
        : new KubeClient(kubeConnection(loadKubeConfig())));
    this.client.onRequest(this.metrics.recordRequest);
    for (const ns of opts.namespaces ?? []) {
      if (!isDnsLabel(ns)) {
        throw new TypeError(`namespaces contains "${ns}", which is not a valid namespace name`);
      }
    }
    // Validate bind addresses now, not at start().
    parseBindAddress("metricsBindAddress", opts.metricsBindAddress ?? "0");
    parseBindAddress("healthProbeBindAddress", opts.healthProbeBindAddress ?? "0");
    const instance = opts.leaderElection?.identity ?? `${hostname()}`;
    this.recorder = new KubeEventRecorder(this.client, {
      reportingController: opts.reportingController ?? "mlmodel-runtime",
      reportingInstance: instance,
      clock: this.#clock,
      log: this.log,
    });
    if (opts.leaderElection) {
      const le = opts.leaderElection;
      this.#elector = new LeaderElector(kubeLeaseClient(this.client, le.namespace, le.name), le, this.#clock);
    }
  }

  /** "host:port" of the servers once started. */
  get addresses(): { metrics?: string; health?: string } {
    return { ...this.#addresses };
  }

  get isLeader(): boolean {
    return this.#elector ? this.#elector.isLeader : this.#started;
  }

  get identity(): string | undefined {
    return this.#elector?.identity;
  }

  /**
   * Registers (or returns) the shared cache of `kind` and returns its read view. Call before
   * start(). Indexes given for a kind already cached are added to it.
   */
  cache<T extends KubeObject = KubeObject>(kind: ResourceKind, opts: CacheOptions<T> = {}): Store<T> {
    return this.#cacheEntry(kind, opts as CacheOptions).store as unknown as Store<T>;
  }

  /** All caches registered so far. */
  get caches(): readonly { kind: ResourceKind; informers: readonly CacheInformer[] }[] {
    return [...this.#caches.values()];
  }

  controller(name: string): ControllerBuilder {
    if (this.#controllers.some((c) => c.name === name))
      throw new Error(`controller "${name}" is already registered`);
    return new ControllerBuilder(name, (opts) => this.#addController(opts));
  }

  get controllers(): readonly Controller[] {
    return this.#controllers;
  }

  /** True when every cache has its first full list. */
  cachesSynced(): boolean {
    return [...this.#caches.values()].every((e) => e.informers.every((i) => i.hasSynced()));
  }

  /** Runs everything until `signal` aborts; resolves after graceful shutdown. */
  async start(signal: AbortSignal = shutdownSignal()): Promise<void> {
    if (this.#started) throw new Error("Manager.start called twice");
    this.#started = true;
    const cachesAbort = new AbortController();
    const servers = await this.#serve();
    const cacheRuns = [...this.#caches.values()].flatMap((e) =>
      e.informers.map((i) => this.#runInformer(i, cachesAbort.signal)),
    );
    const reclaimer = this.#heapReclaimer();
    reclaimer?.start();
    let lost = false;
    try {
      await this.#waitForCaches(signal);
      if (!signal.aborted) lost = await this.#runControllers(signal);
    } finally {
      reclaimer?.stop();
      this.metrics.leaderStatus.set({ name: this.#opts.leaderElection?.name ?? "none" }, 0);
      await this.recorder.flush();
      cachesAbort.abort();
      await Promise.allSettled(cacheRuns);
      await Promise.all(servers.map(closeServer));
      this.log.info({ lost }, "manager stopped");
    }
    if (lost) throw new LeaderElectionLostError(this.#elector?.identity ?? "?");
  }

  /**
   * The heap reclaimer if asked for. Quiet: every cache synced, no cache change and no
   * reconcile since its last look, nothing queued or running.
   */
  #heapReclaimer(): HeapReclaimer | undefined {
    const opts = this.#opts.reclaimHeapWhenQuiet;
    if (!opts) return undefined;
    return new HeapReclaimer(opts === true ? {} : opts, {
      clock: this.#clock,
      log: this.log,
      activity: () => ({
        done: this.#cacheChanges + this.#controllers.reduce((n, c) => n + c.reconciled, 0),
        pending:
          (this.cachesSynced() ? 0 : 1) +
          this.#controllers.reduce((n, c) => n + c.queue.length + c.queue.processing, 0),
      }),
      onReclaim: (freed) => {
        this.metrics.heapReclaims.inc();
        this.metrics.heapReclaimedBytes.inc(freed);
      },
    });
  }

  /** Campaigns if configured, runs controllers while leading; returns true if the lease was lost. */
  async #runControllers(signal: AbortSignal): Promise<boolean> {
    const elector = this.#elector;
    const leName = this.#opts.leaderElection?.name ?? "none";
    if (!elector) {
      await this.#lead(signal);
      return false;
    }
    let leading: Promise<void> | undefined;
    const result = await elector.run(signal, {
      onStartedLeading: (leaderSignal, acquisition) => {
        this.log.info({ identity: elector.identity, ...acquisitionTimes(acquisition) }, "became leader");
        this.metrics.leaderStatus.set({ name: leName }, 1);
        leading = this.#lead(leaderSignal, signal);
      },
      onStoppedLeading: () => this.metrics.leaderStatus.set({ name: leName }, 0),
      onNewLeader: (id) => this.log.info({ leader: id }, "observed leader"),
      onError: (err) => this.log.warn({ err }, "leader election request failed"),
    });
    if (result === "lost")
      this.log.error({ identity: elector.identity }, "lost leadership; stopping controllers");
    await leading;
    return result === "lost";
  }

  /**
   * Runs controllers until `leaderSignal` aborts. Shutdown (`shutdown` signal) drains with the
   * deadline; loss of leadership aborts in-flight reconciles at once (another leader may be
   * acting already).
   */
  async #lead(leaderSignal: AbortSignal, shutdown: AbortSignal = leaderSignal): Promise<void> {
    const runs = this.#controllers.map((c) =>
      c.start().catch((err: unknown) => this.log.error({ err, controller: c.name }, "controller failed")),
    );
    const stopped = new Promise<void>((resolve) => {
      if (leaderSignal.aborted) resolve();
      leaderSignal.addEventListener("abort", () => resolve(), { once: true });
    });
    await stopped;
    const lostLease = !shutdown.aborted;
    if (lostLease) for (const c of this.#controllers) c.abortInFlight(new Error("leadership lost"));
    const deadline = lostLease ? 0 : (this.#opts.shutdownTimeoutMs ?? 30_000);
    await Promise.all(this.#controllers.map((c) => c.stop(deadline)));
    await Promise.allSettled(runs);
  }

  async #waitForCaches(signal: AbortSignal): Promise<void> {
    const all = [...this.#caches.values()].flatMap((e) => e.informers);
    await Promise.all(all.map((i) => i.waitForSync(signal)));
    if (!signal.aborted) this.log.info({ caches: all.map((i) => i.name) }, "caches synced");
  }

  /**
   * Whether the cluster serves `kind`, as its cache knows: true for a required cache, true for
   * an optional one while its kind is served and listed, false for a kind not cached.
   */
  served(kind: ResourceKind): boolean {
    const entry = this.#caches.get(kindName(kind));
    if (!entry) return false;
    return !entry.optional || entry.informers.every((i) => i instanceof OptionalInformer && i.served());
  }

  async #runInformer(informer: CacheInformer, signal: AbortSignal): Promise<void> {
    try {
      await informer.run(signal);
    } catch (err) {
      if (!signal.aborted) this.log.error({ err, cache: informer.name }, "cache stopped unexpectedly");
    }
  }

  async #serve() {
    const servers = [];
    const metricsBind = parseBindAddress("metricsBindAddress", this.#opts.metricsBindAddress ?? "0");
    if (metricsBind) {
      const s = await serve(metricsBind, {
        "/metrics": async () => ({
          status: 200,
          type: this.metrics.registry.contentType,
          body: await this.metrics.registry.metrics(),
        }),
      });
      this.#addresses.metrics = s.address;
      servers.push(s.server);
    }
    const healthBind = parseBindAddress("healthProbeBindAddress", this.#opts.healthProbeBindAddress ?? "0");
    if (healthBind) {
      const s = await serve(healthBind, {
        "/healthz": probe({ ping: () => ({ ok: true }) }),
        "/readyz": probe({
          "informer-sync": () => {
            const unsynced = [...this.#caches.values()]
              .flatMap((e) => e.informers)
              .filter((i) => !i.hasSynced());
            return unsynced.length === 0
              ? { ok: true }
              : { ok: false, reason: `caches not synced: ${unsynced.map((i) => i.name).join(", ")}` };
          },
          "informer-watch": () => watchHealthCheck([...this.#caches.values()].flatMap((e) => e.informers)),
        }),
      });
      this.#addresses.health = s.address;
      servers.push(s.server);
    }
    return servers;
  }

  #addController(opts: ControllerOptions): Controller {
    if (this.#started) throw new Error(`controller "${opts.name}" added after Manager.start`);
    for (const source of opts.sources)
      this.#cacheEntry(source.kind, source.optional ? { optional: true } : {});
    const ctrl = new Controller(opts, {
      informer: (kind) => this.#caches.get(kindName(kind))?.informers ?? this.#cacheEntry(kind, {}).informers,
      store: (kind) => this.#registeredStore(kind, opts.name),
      served: (kind) => this.served(kind),
      client: this.client,
      recorder: this.recorder,
      log: this.log,
      metrics: this.metrics,
      clock: this.#clock,
    });
    this.#controllers.push(ctrl);
    return ctrl;
  }

  #registeredStore(kind: ResourceKind, controller: string): Store {
    const entry = this.#caches.get(kindName(kind));
    if (!entry) {
      throw new Error(
        `controller "${controller}" read the cache of ${kindName(kind)}, which is not registered: add it with for/owns/watches or mgr.cache(kind) before start`,
      );
    }
    return entry.store;
  }

  #cacheEntry(kind: ResourceKind, opts: CacheOptions): CacheEntry {
    const id = kindName(kind);
    const existing = this.#caches.get(id);
    if (existing) {
      if (existing.kind.version !== kind.version) {
        throw new Error(
          `${id} is cached as ${existing.kind.version}; cannot also cache it as ${kind.version}`,
        );
      }
      if (existing.optional && !opts.optional) {
        throw new Error(
          `${id} is cached only while it is served (optional); a source or cache that needs it always cannot share that cache: register it as optional too`,
        );
      }
      const differs = (what: string, asked: unknown, has: unknown) => {
        if (asked !== undefined && asked !== has)
          throw new Error(
            `the cache of ${id} is already registered with ${has === undefined ? "no" : "another"} ${what}: register it with mgr.cache(kind, { ${what} }) before any controller that watches the kind`,
          );
      };
      differs("transform", opts.transform, existing.transform);
      differs("labelSelector", opts.labelSelector, existing.labelSelector);
      differs("keepManagedFields", opts.keepManagedFields, existing.keepManagedFields);
      differs("metadataOnly", opts.metadataOnly, existing.metadataOnly);
      for (const [name, fn] of Object.entries(opts.indexes ?? {})) {
        for (const i of existing.informers) i.store.addIndex(name, fn);
      }
      return existing;
    }
    if (this.#started) throw new Error(`cache of ${id} registered after Manager.start`);
    validateKind(kind);
    const namespaces = kind.namespaced && this.#opts.namespaces?.length ? this.#opts.namespaces : [undefined];
    const optional = opts.optional === true;
    if (optional && opts.metadataOnly)
      throw new Error(`the cache of ${id} cannot be both optional and metadataOnly`);
    const informers: CacheInformer[] = namespaces.map((namespace) => {
      const informerOpts = {
        scope: {
          ...(namespace ? { namespace } : {}),
          ...(opts.labelSelector ? { labelSelector: opts.labelSelector } : {}),
        },
        transform: opts.transform ?? this.#opts.transform,
        ...(opts.keepManagedFields !== undefined ? { keepManagedFields: opts.keepManagedFields } : {}),
        indexes: opts.indexes ?? {},
        ...(this.#opts.healthGracePeriodMs !== undefined
          ? { healthGracePeriodMs: this.#opts.healthGracePeriodMs }
          : {}),
        watcher: {
          ...this.#opts.watcher,
          clock: this.#clock,
          reachability: this.reachability,
          onEvent: this.metrics.watchEventHook(id),
          onError: (err: unknown, state: { kind: string }, retryInMs: number) => {
            const { level, message } = watchErrorLog(err);
            this.log[level]({ err, cache: id, state: state.kind, retryInMs }, message);
          },
        },
      };
      return optional
        ? new OptionalInformer(this.client, kind, {
            ...informerOpts,
            ...(this.#opts.servedPollIntervalMs !== undefined
              ? { pollIntervalMs: this.#opts.servedPollIntervalMs }
              : {}),
          })
        : new Informer(
            opts.metadataOnly
              ? metadataOnlySource(this.client, kind, informerOpts.scope, {
                  keepManagedFields: opts.keepManagedFields === true,
                })
              : this.client,
            kind,
            informerOpts,
          );
    });
    // Changes count as work for the heap reclaimer: it waits for caches that stopped changing.
    for (const informer of informers) informer.addHandler(() => this.#cacheChanges++);
    const store =
      informers.length === 1 ? informers[0]!.store : new MultiStore(informers.map((i) => i.store));
    const entry = {
      kind,
      informers,
      store,
      optional,
      transform: opts.transform,
      labelSelector: opts.labelSelector,
      keepManagedFields: opts.keepManagedFields,
      metadataOnly: opts.metadataOnly,
    };
    this.#caches.set(id, entry);
    return entry;
  }
}

/**
 * client-node's KubeConfig loaded the usual way ($KUBECONFIG, ~/.kube/config, in-cluster).
 * client-node is imported by this call, not by the runtime: prefer loadKubeConfig().
 */
export function defaultKubeConfig(): KubeConfig {
  const { KubeConfig: ClientNodeKubeConfig } = createRequire(import.meta.url)(
    "@kubernetes/client-node",
  ) as typeof import("@kubernetes/client-node");
  const kc = new ClientNodeKubeConfig();
  kc.loadFromDefault();
  return kc;
}

/** An AbortSignal that aborts on SIGTERM or SIGINT (graceful shutdown). */
export function shutdownSignal(): AbortSignal {
  const ac = new AbortController();
  const onSignal = (sig: NodeJS.Signals) => {
    process.off("SIGTERM", onSignal);
    process.off("SIGINT", onSignal);
    ac.abort(new Error(`received ${sig}`));
  };
  process.once("SIGTERM", onSignal);
  process.once("SIGINT", onSignal);
  return ac.signal;
}

/** An acquisition as log fields, its instants in ISO form to line up with the Lease's and the audit log's. */
function acquisitionTimes(a: Acquisition): Record<string, unknown> {
  const fields: Record<string, unknown> = {
    from: a.from,
    attemptAt: new Date(a.attemptAt).toISOString(),
    wakeLateMs: a.wakeLateMs,
    attempts: a.attempts.map((attempt) => ({ ...attempt, at: new Date(attempt.at).toISOString() })),
  };
  if (a.observedAt !== undefined) fields.observedAt = new Date(a.observedAt).toISOString();
  if (a.expiredAt !== undefined) fields.expiredAt = new Date(a.expiredAt).toISOString();
  return fields;
}
