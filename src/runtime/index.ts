/**
 * The controller runtime's public API. See docs/runtime.md.
 */

export { ItemBackoff, JitterBackoff } from "./backoff.ts";
export type {
  AppliedVersion,
  ApplyOptions,
  Connection,
  DeleteOptions,
  KubeClientOptions,
  ListOptions,
  ListResult,
  PatchType,
  RequestRecord,
  Verb,
  WatchOptions,
} from "./client.ts";
export { answerMeta, KubeClient, kubeConfigConnection, WatchInactivityError } from "./client.ts";
export type { Clock, Timer } from "./clock.ts";
export { FakeClock, realClock, sleep } from "./clock.ts";
export type {
  ControllerDeps,
  ControllerOptions,
  MapFunc,
  Outcome,
  Source,
  SourceInformer,
  SourceOptions,
} from "./controller.ts";
export { Controller, ControllerBuilder, outcomeOf, requestsFor } from "./controller.ts";
export {
  ApiError,
  isConflict,
  isGone,
  isNotFound,
  isTooManyRequests,
  isUnreachable,
  parseRetryAfter,
  TerminalError,
} from "./errors.ts";
export type { EventRecorder, EventRecorderOptions, EventSink, EventType } from "./events.ts";
export { KubeEventRecorder, logEventRecorder } from "./events.ts";
export type { HealthStatus } from "./health.ts";
export { defaultHealthGracePeriodMs, describeError, WatchHealth, watchHealthCheck } from "./health.ts";
export type { Activity, Heap, HeapReclaimOptions } from "./heap-reclaim.ts";
export { defaultHeapReclaim, HeapReclaimer, reclaimDue, v8Heap } from "./heap-reclaim.ts";
export type { ChangeHandler, InformerOptions, Transform } from "./informer.ts";
export { Informer, reflector } from "./informer.ts";
export type { ResourceKind } from "./kinds.ts";
export {
  apiVersionOf,
  builtinKinds,
  collectionPath,
  kindName,
  matchesKind,
  objectPath,
  validateKind,
} from "./kinds.ts";
export type {
  ConnectionOptions,
  ExecConfig,
  ExecCredentialStatus,
  KubeConfigCluster,
  KubeConfigUser,
  KubeContext,
  LoadOptions,
} from "./kubeconfig.ts";
export {
  inCluster,
  KubeConfigError,
  kubeConnection,
  loadKubeConfig,
  runExecPlugin,
  serviceAccountDir,
  tlsOf,
  tokenFileRefreshMs,
} from "./kubeconfig.ts";
export type {
  Acquisition,
  AttemptAccount,
  LeaderCallbacks,
  LeaderElectionOptions,
  Lease,
  LeaseClient,
  LeaseSpec,
} from "./leader.ts";
export { kubeLeaseClient, LeaderElector, microTime } from "./leader.ts";
export type { CacheOptions, ManagerOptions } from "./manager.ts";
export { defaultKubeConfig, LeaderElectionLostError, Manager, shutdownSignal } from "./manager.ts";
export {
  asMetadataOf,
  metadataListAccept,
  metadataOnlySource,
  metadataWatchAccept,
} from "./metadata-only.ts";
export type { ReconcileOutcome } from "./metrics.ts";
export { RuntimeMetrics } from "./metrics.ts";
export type { OptionalInformerOptions } from "./optional-informer.ts";
export { defaultServedPollIntervalMs, isServed, OptionalInformer } from "./optional-informer.ts";
export {
  controllerOf,
  controllerOwnerRef,
  ensureFinalizer,
  hasFinalizer,
  isControlledBy,
  ownerRequest,
  removeFinalizer,
} from "./owners.ts";
export type { Predicate } from "./predicates.ts";
export {
  and,
  annotationsChangedPredicate,
  equalValues,
  generationChangedPredicate,
  labelSelectorPredicate,
  labelsChangedPredicate,
  not,
  or,
  predicate,
  resourceVersionChangedPredicate,
  selectedChangedPredicate,
} from "./predicates.ts";
export type { Priority, QueueMetrics, WorkQueueOptions } from "./queue.ts";
export { WorkQueue } from "./queue.ts";
export type { WaitOutcome } from "./reachability.ts";
export { Reachability } from "./reachability.ts";
export type { Logger, ReconcileContext, ReconcileResult, Reconciler } from "./reconcile.ts";
export type { IndexFunc, Store, StoreChange } from "./store.ts";
export {
  CONTROLLER_OWNER_INDEX,
  controllerOwnerIndex,
  deepFreeze,
  MemoryStore,
  MultiStore,
  NAMESPACE_INDEX,
  stripManagedFields,
} from "./store.ts";
export type { HttpRequest, HttpResponse, TlsSettings } from "./transport.ts";
export { NodeTransport } from "./transport.ts";
export type {
  KubeObject,
  ObjectKey,
  ObjectMeta,
  OwnerReference,
  Request,
  Status,
  WatchEvent,
} from "./types.ts";
export { isDnsLabel, keyString, objectKey, parseKey } from "./types.ts";
export type { Scope, WatcherEvent, WatcherOptions, WatcherState, WatchSource } from "./watcher.ts";
export {
  clientSource,
  defaultUnreachableMaxMs,
  nextStateAfterError,
  retryDelay,
  watchErrorLog,
  watcher,
} from "./watcher.ts";
