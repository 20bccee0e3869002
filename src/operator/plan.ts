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
} from "../api/mlmodel.ts";
import { defaultCredentialsDir } from "../downloader/contract.ts";
import { redactUri } from "../downloader/redact.ts";
import { deepFreeze } from "../runtime/index.ts";
import { keptInput, sameData } from "./memo.ts";
import { childNames, shortHash } from "./names.ts";
import type { ResolvedRuntime } from "./runtime-selection.ts";
import { TtlMap } from "./ttl-map.ts";

/** Settings of the operator process that shape children (flags of `mlmodel operator`). */
export interface OperatorConfig {
  /** The image whose entrypoint is `mlmodel`; its `download` command fills model storage. */
  downloaderImage: string;
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
   * How long a serving pod keeps answering after it is told to stop (a preStop sleep), before
   * its server gets SIGTERM: the Service's endpoints and every node's kube-proxy rules drop the
   * pod in that time, so no new request reaches a server that is shutting down. Seen on a real
   * node without it: MLServer answered 500 ("Queue ... is closed", "KeyError") to the requests
   * that kube-proxy still sent to an old pod during a rollout.
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
    }
  /** A user's claim mounted in place (read-only), nothing copied. */
  | { type: "pvc"; claimName: string; subPath: string }
  /** Inside the image, or read by the server itself from a model config file. */
  | { type: "none" };

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
  constructor(reason: string, message: string) {
    super(message);
    this.name = "PlanError";
    this.reason = reason;
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
export function planModel(model: MLModel, runtime: ResolvedRuntime, recorded?: RecordedSource): ServingPlan {
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
    source = {
      type: "download",
      shownUri: redactUri(uri),
      ...(recorded ? { uriSecret: recorded.uriSecret } : { exactUri: uri }),
      content: hash,
      sha256: spec.model.sha256,
      claimName: childNames.storage(name),
      dest: version ? `${base}/${version}` : base,
      jobName: childNames.download(name, hash),
    };
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
export function planned(model: MLModel, runtime: ResolvedRuntime, recorded?: RecordedSource): ServingPlan {
  const uid = model.metadata.uid;
  if (!uid) return planModel(model, runtime, recorded);
  const entries = plansByModel.get(uid) ?? [];
  const found = entries.find((e) => sameInputs(e.inputs, model, runtime, recorded));
  const plan = found?.plan ?? planModel(model, runtime, recorded);
  const rest = entries.filter((e) => e !== found);
  const inputs: PlanInputs = found?.inputs ?? {
    name: model.metadata.name,
    namespace: model.metadata.namespace,
    spec: keptInput(model.spec),
    runtimeRef: runtime.ref,
    runtimeSpec: keptInput(runtime.spec),
    content: recorded?.content,
    uriSecret: recorded?.uriSecret,
  };
  plansByModel.set(uid, [{ inputs, plan }, ...rest].slice(0, plansPerModel));
  return plan;
}

function sameInputs(
  kept: PlanInputs,
  model: MLModel,
  runtime: ResolvedRuntime,
  recorded: RecordedSource | undefined,
): boolean {
  return (
    kept.name === model.metadata.name &&
    kept.namespace === model.metadata.namespace &&
    kept.runtimeRef === runtime.ref &&
    kept.content === recorded?.content &&
    kept.uriSecret === recorded?.uriSecret &&
    sameData(kept.spec, model.spec) &&
    sameData(kept.runtimeSpec, runtime.spec)
  );
}
