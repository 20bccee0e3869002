/**
 * The serving plan: an MLModel with every default resolved (schema defaults, then the
 * runtime's, then the operator's), from which all desired children are derived. Defaults live
 * here and in the schema, nowhere else.
 */
import { applySchemaDefaults } from "../api/defaults.ts";
import {
  type DefaultedMLModelSpec,
  type MLModel,
  type MLModelSpec,
  mlModelSpecSchema,
  type StorageMode,
} from "../api/mlmodel.ts";
import { defaultCredentialsDir } from "../downloader/contract.ts";
import { redactUri } from "../downloader/redact.ts";
import { cacheKey } from "../nodecache/contract.ts";
import { deepFreeze } from "../runtime/index.ts";
import { keptInput, sameData } from "./memo.ts";
import { childNames, shortHash } from "./names.ts";
import type { ResolvedRuntime } from "./runtime-selection.ts";
import { TtlMap } from "./ttl-map.ts";

/** Settings of the operator process that shape children (flags of `mlmodel operator`). */
export interface OperatorConfig {
  /** The image whose entrypoint is `mlmodel`; its `download` command fills model storage. */
  downloaderImage: string;
  /**
   * The node cache's URL (http://<its Service's ClusterIP>:<nodeCachePort>), found at start
   * (node-cache.ts) or given; undefined when no node cache is installed: every model then uses
   * a claim.
   */
  nodeCacheUrl?: string;
  /** The operator's namespace, where the node cache's agents write their state ConfigMaps. */
  nodeCacheNamespace?: string;
  /**
   * Whether the operator's caches see the agents' state ConfigMaps (false when its namespaces
   * leave the node cache's out): without them status.cache lists no node rather than none.
   */
  nodeCacheStatesWatched?: boolean;
}

export const defaultOperatorConfig: OperatorConfig = {
  downloaderImage: "ghcr.io/mlmodel-operator/mlmodel:0.1.0",
};

export const defaults = {
  replicas: 1,
  startupTimeoutSeconds: 600,
  modelMountPath: "/mnt/models",
  runAsUser: 1000,
  probePeriodSeconds: 10,
  /**
   * How a stopping serving pod drains: its preStop hook holds SIGTERM back until no new
   * connection has reached the pod for drainQuietSeconds (the Service's EndpointSlices and every
   * kube-proxy have dropped it, however long that took), for at most drainMaxSeconds. A fixed
   * wait is not enough on a busy node: endpoint removal and kube-proxy's rule update can lag a
   * pod's deletion by more than any margin that keeps rollouts quick. See docs/serving-drain.md.
   */
  drainQuietSeconds: 3,
  drainMaxSeconds: 20,
  /** The drain bound plus the server's own shutdown (SIGTERM to SIGKILL). */
  terminationGracePeriodSeconds: 30,
  /**
   * The fixed drain (a preStop sleep) of a custom image, which may have no shell to observe its
   * connections with; a ServingRuntime's image drains by observation instead.
   */
  drainSeconds: 5,
  downloadBackoffLimit: 3,
  configMountDir: "/etc/mlmodel/model-config",
  credentialsDir: defaultCredentialsDir,
  /**
   * How long a new claim may wait for its volume before the download pod's "unbound
   * PersistentVolumeClaims" is reported as a problem (status.ts, claimBinding): the scheduler
   * often sees the pod before the PV controller or a provisioner has bound the claim, and that
   * can take minutes (a cloud disk; the PV controller binding hundreds of pre-made volumes
   * under load). Meanwhile status says the download waits for the volume.
   */
  claimBindingGraceSeconds: 300,
  /**
   * The cache-copy init container of a NodeCache serving pod: it streams files from its node's
   * agent and hashes them, so a little CPU and memory suffice (a copy is disk-bound).
   */
  cacheCopyResources: {
    requests: { cpu: "50m", memory: "64Mi" },
    limits: { memory: "256Mi" },
  },
  /** Where a NodeCache model's replicas spread when the user gives no placement (desired.ts). */
  spread: {
    nodeKey: "kubernetes.io/hostname",
    zoneKey: "topology.kubernetes.io/zone",
    /** The zone preference's weight beside the scheduler's other scores (1-100). */
    zoneWeight: 50,
  },
  /**
   * Seconds a NodeCache replica stays on a node that went NotReady or unreachable before the
   * taint evicts it (the node's pods are then replaced elsewhere). Kubernetes' default, 300,
   * suits pods whose data lives on that node; a NodeCache replica's model is on the other nodes.
   */
  nodeLossTolerationSeconds: 30,
  /** Where the download Job of a NodeCache model writes before it uploads to its node's agent. */
  scratchMountPath: "/scratch",
} as const;

export type ModelSource =
  /** Downloaded by a Job into our PVC at dest; served from there. */
  | {
      type: "download";
      /** The URI as status, Events and logs show it: credentials redacted (redactUri). */
      shownUri: string;
      /**
       * The exact URI, when the operator knows it: always for the spec as written; not for a
       * revision recorded with its URI redacted, whose exact URI only `uriSecret` holds.
       */
      exactUri?: string;
      /** The Secret that holds the exact URI of a recorded revision (see RecordedSource). */
      uriSecret?: string;
      /** Content hash: the download's directory and Job are named by it. */
      content: string;
      sha256?: string;
      claimName: string;
      dest: string;
      jobName: string;
      /**
       * Set in storage mode NodeCache: the node cache agents keep the model (no claim), under
       * this key, reached at this URL.
       */
      nodeCache?: NodeCacheSource;
    }
  /** A user's claim mounted in place (read-only), nothing copied. */
  | { type: "pvc"; claimName: string; subPath: string }
  /** Inside the image, or read by the server itself from a model config file. */
  | { type: "none" };

/** Where a NodeCache model's pods get it: the agents' URL, the key, the cache-copy image. */
export interface NodeCacheSource {
  url: string;
  key: string;
  /** The operator's image (its downloaderImage), whose `mlmodel cache-copy` fills a pod's copy. */
  image: string;
}

export interface ServingPlan {
  name: string;
  namespace: string;
  spec: DefaultedMLModelSpec;
  runtime: ResolvedRuntime;
  modelName: string;
  image: string;
  command: string[];
  args: string[];
  env: { name: string; value: string }[];
  restPort?: number;
  grpcPort?: number;
  source: ModelSource;
  /** Where the model storage is mounted in the serving container. */
  mountPath: string;
  /** $(MODEL_DIR): the base path the server reads the model from. */
  modelDir: string;
  configFile?: { configMapName: string; key: string; path: string };
  credentials?: { secretName: string; googleCredentialsKey?: string };
  replicas?: number;
  startupTimeoutSeconds: number;
  readinessPath?: string;
  runAsUser: number;
}

export class PlanError extends Error {
  readonly reason: string;
  /** The status condition the failure is told in (RuntimeResolved unless said). */
  readonly condition: "RuntimeResolved" | "StorageReady" | undefined;
  constructor(reason: string, message: string, condition?: "RuntimeResolved" | "StorageReady") {
    super(message);
    this.name = "PlanError";
    this.reason = reason;
    this.condition = condition;
  }
}

/**
 * What a ControllerRevision records about a downloaded model whose URI has credentials in it
 * (a pre-signed URL, a SAS, a token): its spec keeps only the redacted URI, so the content hash
 * (computed from the exact URI) and the Secret that holds the exact URI are recorded beside it.
 */
export interface RecordedSource {
  content: string;
  uriSecret: string;
  /** The node cache key of the exact URI (a hash: it shows nothing of the URI). */
  cacheKey?: string;
}

/** What decides a downloaded model's storage mode besides its spec. */
export interface StorageContext {
  /** The node cache's URL; undefined when none is installed. */
  nodeCacheUrl?: string;
  /** The image of the serving pods' cache-copy init container (the operator's downloaderImage). */
  cacheCopyImage?: string;
  /** The model already has its claim (created by a plan in mode Claim). */
  hasClaim?: boolean;
  /**
   * The cache-copy image of each cache key the model's live Deployments serve: a version already
   * served keeps its init container's image when the operator is upgraded, so an upgrade rolls
   * no pod; a new version gets the operator's own image.
   */
  servedCacheCopyImages?: ReadonlyMap<string, string>;
}

/**
 * The storage mode of a downloaded model: mode Claim and NodeCache as asked (NodeCache only
 * when the node cache is installed: else a PlanError that says how to fix it); Auto is
 * NodeCache when the node cache is installed, the user did not ask for a shared claim
 * (ReadWriteMany) and the model has no claim of its own yet, so that an operator upgrade or
 * the node cache's install never moves a model that a claim serves; else Claim.
 */
export function storageModeOf(
  storage: Pick<DefaultedMLModelSpec["storage"], "accessMode"> & { mode?: StorageMode },
  context: StorageContext,
): "Claim" | "NodeCache" {
  const mode = storage.mode ?? "Auto";
  if (mode === "Claim") return "Claim";
  if (mode === "NodeCache") {
    if (!context.nodeCacheUrl) {
      throw new PlanError(
        "NodeCacheNotInstalled",
        "spec.storage.mode is NodeCache but the operator found no node cache (Service mlmodel-node-cache in its namespace); install it (Helm value nodeCache.enabled, or dist/install.yaml) and restart the operator, or set spec.storage.mode to Auto or Claim",
        "StorageReady",
      );
    }
    return "NodeCache";
  }
  if (!context.nodeCacheUrl || context.hasClaim || storage.accessMode === "ReadWriteMany") return "Claim";
  return "NodeCache";
}

/** Identifies the model's bytes: a new value means a new download (and a new directory). */
export function contentHash(spec: MLModelSpec): string {
  return shortHash({ uri: spec.model.uri, version: spec.model.version, sha256: spec.model.sha256 });
}

/**
 * Replicas the operator sets on the Deployment; undefined when a HorizontalPodAutoscaler owns
 * them. Autoscaling with minReplicas 0 means scaled to zero: 0 and no autoscaler.
 */
function fixedReplicas(spec: DefaultedMLModelSpec): number | undefined {
  if (!spec.autoscaling) return spec.replicas ?? defaults.replicas;
  return spec.autoscaling.minReplicas === 0 ? 0 : undefined;
}

/**
 * `recorded`: set when the spec is a revision's whose URI was recorded redacted; its content
 * and URI Secret stand in for what the exact URI would give.
 */
export function planModel(
  model: MLModel,
  runtime: ResolvedRuntime,
  recorded?: RecordedSource,
  storage: StorageContext = {},
): ServingPlan {
  const name = model.metadata.name!;
  const namespace = model.metadata.namespace!;
  // The name becomes the Service's, which must be a DNS-1035 label (the CRD can only check
  // the length: a pattern on metadata.name exceeds the CEL cost budget).
  if (!/^[a-z]([-a-z0-9]*[a-z0-9])?$/.test(name)) {
    throw new PlanError(
      "InvalidName",
      `metadata.name "${name}" cannot name the model's Service: use lowercase letters, digits and '-', starting with a letter (no dots); recreate the MLModel under such a name`,
    );
  }
  const spec = applySchemaDefaults(mlModelSpecSchema, model.spec);
  const rt = runtime.spec;
  const image = spec.image ?? rt?.image;
  if (!image) throw new PlanError("NoImage", "no serving image: set spec.image or a runtime");

  const protocol = spec.endpoint.protocol;
  const wantsRest = protocol === undefined || protocol === "REST" || protocol === "Both";
  const wantsGrpc = protocol === "gRPC" || protocol === "Both" || (protocol === undefined && !!rt?.grpcPort);
  const restPort = wantsRest
    ? (spec.endpoint.restPort ?? rt?.restPort ?? (rt ? undefined : 8080))
    : undefined;
  const grpcPort = wantsGrpc ? (spec.endpoint.grpcPort ?? rt?.grpcPort) : undefined;
  if (protocol && protocol !== "gRPC" && restPort === undefined) {
    throw new PlanError(
      "ProtocolNotSupported",
      `runtime ${runtime.ref} has no REST port; set spec.endpoint.restPort or protocol gRPC`,
    );
  }
  if (wantsGrpc && grpcPort === undefined) {
    throw new PlanError(
      "ProtocolNotSupported",
      `endpoint.protocol ${protocol} needs a gRPC port: runtime ${runtime.ref} has none; set spec.endpoint.grpcPort`,
    );
  }

  const mountPath = rt?.modelMountPath ?? defaults.modelMountPath;
  const uri = spec.model.uri;
  const version = spec.model.version;
  let source: ModelSource = { type: "none" };
  let modelDir = spec.model.path ?? mountPath;
  if (uri?.startsWith("pvc://")) {
    const [claimName = "", ...rest] = uri.slice("pvc://".length).split("/");
    source = { type: "pvc", claimName, subPath: rest.filter(Boolean).join("/") };
  } else if (uri) {
    // Each content gets its own directory, so a new version downloads beside the one being
    // served and the rollout switches over without downtime. Versioned runtimes read
    // <base>/<version>, so the version is a sub-directory of the base path.
    const hash = recorded?.content ?? contentHash(spec);
    const base = `${mountPath}/${hash}`;
    modelDir = base;
    const key = modelCacheKey(uri, spec.model.sha256, recorded);
    const nodeCache =
      storageModeOf(spec.storage, storage) === "NodeCache"
        ? {
            url: storage.nodeCacheUrl!,
            key,
            image:
              storage.servedCacheCopyImages?.get(key) ??
              storage.cacheCopyImage ??
              defaultOperatorConfig.downloaderImage,
          }
        : undefined;
    source = {
      type: "download",
      shownUri: redactUri(uri),
      ...(recorded ? { uriSecret: recorded.uriSecret } : { exactUri: uri }),
      content: hash,
      sha256: spec.model.sha256,
      claimName: childNames.storage(name),
      dest: version ? `${base}/${version}` : base,
      jobName: childNames.download(name, hash),
      ...(nodeCache ? { nodeCache } : {}),
    };
  }
  if (source.type !== "download" && spec.storage.mode === "NodeCache") {
    // Admission refuses this (a CEL rule); a CRD older than the rule may still hold it.
    throw new PlanError(
      "NodeCacheNeedsDownload",
      `spec.storage.mode is NodeCache but nothing is downloaded (spec.model.uri is ${uri ? `"${redactUri(uri)}"` : "empty"}); the node cache keeps downloaded models only: set spec.storage.mode to Auto or Claim`,
      "StorageReady",
    );
  }

  const configRef = spec.model.configMapRef;
  const configFile = configRef
    ? {
        configMapName: configRef.name,
        key: configRef.key,
        path: `${defaults.configMountDir}/${configRef.key}`,
      }
    : undefined;
  const runtimeArgs = [...(rt?.args ?? []), ...((configFile ? rt?.modelConfigArgs : rt?.modelArgs) ?? [])];
  const modelName = spec.model.name ?? name;

  // Later entries win: operator-provided variables, then the runtime's, then the user's.
  const env = new Map<string, string>();
  env.set("MODEL_NAME", modelName);
  env.set("MODEL_DIR", modelDir);
  if (version) env.set("MODEL_VERSION", version);
  if (configFile) env.set("MODEL_CONFIG_FILE", configFile.path);
  if (restPort) env.set("REST_PORT", String(restPort));
  if (grpcPort) env.set("GRPC_PORT", String(grpcPort));
  const creds = spec.model.credentialsSecretRef;
  if (creds?.googleCredentialsKey) {
    env.set("GOOGLE_APPLICATION_CREDENTIALS", `${defaults.credentialsDir}/${creds.googleCredentialsKey}`);
  }
  for (const e of rt?.env ?? []) env.set(e.name, e.value ?? "");
  for (const e of spec.env ?? []) env.set(e.name, e.value ?? "");

  // Frozen: a plan is what the revision is memoized on (servingPodTemplate), so it must never change.
  return deepFreeze({
    name,
    namespace,
    spec,
    runtime,
    modelName,
    image,
    command: spec.command ?? rt?.command ?? [],
    args: spec.args ?? runtimeArgs,
    env: [...env].map(([n, value]) => ({ name: n, value })),
    restPort,
    grpcPort,
    source,
    mountPath,
    modelDir,
    configFile,
    credentials: creds
      ? { secretName: creds.name, googleCredentialsKey: creds.googleCredentialsKey }
      : undefined,
    replicas: fixedReplicas(spec),
    startupTimeoutSeconds:
      spec.startupTimeoutSeconds ?? rt?.startupTimeoutSeconds ?? defaults.startupTimeoutSeconds,
    readinessPath: rt?.readinessPath?.replaceAll("$(MODEL_NAME)", modelName),
    runAsUser: rt?.runAsUser ?? defaults.runAsUser,
  }) as ServingPlan;
}

/**
 * The node cache key of a model's version: from its exact URI when the plan knows it; a
 * revision recorded with its URI redacted keeps the key beside it (revisionData), and one
 * recorded before keys were takes a key of its content hash (its own entry, not shared).
 */
function modelCacheKey(
  uri: string,
  sha256: string | undefined,
  recorded: RecordedSource | undefined,
): string {
  if (!recorded) return cacheKey(uri, sha256);
  return recorded.cacheKey ?? cacheKey(`content:${recorded.content}`, sha256);
}

/** Models whose recent plans are kept (planned): more than a rollout keeps in flight at once. */
export const plannedModels = 512;
/** Plans kept per model: the spec's, a rollback's or a canary's revision, and a spare. */
const plansPerModel = 4;

interface PlanInputs {
  name: string | undefined;
  namespace: string | undefined;
  spec: MLModelSpec;
  runtimeRef: string;
  runtimeSpec: ResolvedRuntime["spec"];
  content: string | undefined;
  uriSecret: string | undefined;
  cacheKey: string | undefined;
  nodeCacheUrl: string | undefined;
  cacheCopyImage: string | undefined;
  hasClaim: boolean;
  servedCacheCopyImages: string;
}

/** The last plans of the last `plannedModels` models, by uid, the most recently used last. */
const plansByModel = new TtlMap<string, { inputs: PlanInputs; plan: ServingPlan }[]>({
  maxEntries: plannedModels,
});

/**
 * planModel, remembered: the same plan object for the same inputs (the model's name,
 * namespace and spec, the runtime, the recorded source), compared as data, so a reconcile of a
 * model whose inputs did not change neither plans nor hashes its revision again (the revision,
 * desired children and their hashes are memoized on the plan object). A changed input is a
 * new plan; a model's plans are kept by uid, for the `plannedModels` models used last.
 */
export function planned(
  model: MLModel,
  runtime: ResolvedRuntime,
  recorded?: RecordedSource,
  storage: StorageContext = {},
): ServingPlan {
  const uid = model.metadata.uid;
  if (!uid) return planModel(model, runtime, recorded, storage);
  const entries = plansByModel.get(uid) ?? [];
  const found = entries.find((e) => sameInputs(e.inputs, model, runtime, recorded, storage));
  const plan = found?.plan ?? planModel(model, runtime, recorded, storage);
  const rest = entries.filter((e) => e !== found);
  const inputs: PlanInputs = found?.inputs ?? {
    name: model.metadata.name,
    namespace: model.metadata.namespace,
    spec: keptInput(model.spec),
    runtimeRef: runtime.ref,
    runtimeSpec: keptInput(runtime.spec),
    content: recorded?.content,
    uriSecret: recorded?.uriSecret,
    cacheKey: recorded?.cacheKey,
    nodeCacheUrl: storage.nodeCacheUrl,
    cacheCopyImage: storage.cacheCopyImage,
    hasClaim: Boolean(storage.hasClaim),
    servedCacheCopyImages: servedImagesId(storage),
  };
  plansByModel.set(uid, [{ inputs, plan }, ...rest].slice(0, plansPerModel));
  return plan;
}

function servedImagesId(storage: StorageContext): string {
  const served = storage.servedCacheCopyImages;
  return served?.size ? JSON.stringify([...served].sort()) : "";
}

function sameInputs(
  kept: PlanInputs,
  model: MLModel,
  runtime: ResolvedRuntime,
  recorded: RecordedSource | undefined,
  storage: StorageContext,
): boolean {
  return (
    kept.cacheKey === recorded?.cacheKey &&
    kept.nodeCacheUrl === storage.nodeCacheUrl &&
    kept.cacheCopyImage === storage.cacheCopyImage &&
    kept.hasClaim === Boolean(storage.hasClaim) &&
    kept.servedCacheCopyImages === servedImagesId(storage) &&
    kept.name === model.metadata.name &&
    kept.namespace === model.metadata.namespace &&
    kept.runtimeRef === runtime.ref &&
    kept.content === recorded?.content &&
    kept.uriSecret === recorded?.uriSecret &&
    sameData(kept.spec, model.spec) &&
    sameData(kept.runtimeSpec, runtime.spec)
  );
}
