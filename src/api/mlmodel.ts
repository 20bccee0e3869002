/**
 * The MLModel kind: one model, served. The schema below is the single source of truth: the
 * CRD in deploy/crds is generated from it and the TypeScript types are derived from it.
 */
import { conditions, envList, matching, objectName, port, quantity, stringList } from "./fragments.ts";
import type { KubeObjectOf } from "./object.ts";
import type { FromSchema } from "./schema-types.ts";

const uriCredentialsAdvice =
  "Put the credentials in a Secret and name it in spec.model.credentialsSecretRef (docs/downloader.md lists its keys for each scheme)";

/** A user name or password before the host (`scheme://user:pass@host`), in CEL's regex syntax. */
export const uriUserinfoPattern = "^([^:/?#]+://)?[^/?#]*@";

// The API server quotes the whole value after "Invalid value:" for a FieldValueInvalid rule, and
// not for FieldValueForbidden: the URI rules use the latter and echo only what is safe to show.
const uriRuleReason = "FieldValueForbidden";

// CEL: spec.model.uri as an admission error may echo it. A URI with a password is not shown at
// all, and a query or fragment (a pre-signed URL's signature, a SAS) is cut off.
const uriAsEchoed = `(self.matches('${uriUserinfoPattern}') ? '(not shown: it holds a user name or password)' : '"' + self.split('?')[0].split('#')[0] + (self.matches('[?#]') ? '?..."' : '"'))`;
// CEL: the authority of a URI with userinfo, and the host it names (after its last "@").
const uriAuthority = "self.split('://')[1].split('/')[0].split('?')[0].split('#')[0]";
const uriWithoutUserinfo = `(self.contains('://') ? self.split('://')[0] + '://REDACTED@' + ${uriAuthority}.substring(${uriAuthority}.lastIndexOf('@') + 1) + '/...' : 'REDACTED@...')`;

const modelSpec = {
  type: "object",
  description:
    "Where the model lives and what it is. Give uri (downloaded once into storage, or mounted in place for pvc://), or configMapRef (a TensorFlow Serving model config file whose base paths the server reads itself), or neither when spec.image already contains the model (then set path).",
  properties: {
    uri: {
      type: "string",
      description:
        "Location of the model: s3://bucket/prefix, gs://bucket/prefix, https://host/file.tar.gz, azblob://account/container/prefix (Azure Blob), hf://org/repo, or pvc://claim-name/sub/path to serve from an existing PersistentVolumeClaim without copying.",
      minLength: 1,
      maxLength: 2048,
      "x-kubernetes-validations": [
        {
          rule: "self.matches('^(s3|gs|https?|azblob|hf|pvc)://[^\\\\s]+$')",
          messageExpression: `'must be s3://, gs://, http://, https://, azblob://, hf:// or pvc:// followed by a location without spaces, got ' + ${uriAsEchoed}`,
          reason: uriRuleReason,
        },
        {
          rule: "!self.startsWith('pvc://') || self.matches('^pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/.*)?$')",
          messageExpression: `'a pvc:// URI names a PersistentVolumeClaim in the same namespace, e.g. pvc://models/resnet; got ' + ${uriAsEchoed}`,
          reason: uriRuleReason,
        },
        {
          // The URI shows in status, Events, logs and the download Job: a password in it would too.
          rule: `!self.matches('${uriUserinfoPattern}')`,
          messageExpression: `'must not contain a user name or password (got ' + ${uriWithoutUserinfo} + '): the URI is shown in status, Events and logs. ${uriCredentialsAdvice}'`,
          message: `must not contain a user name or password: the URI is shown in status, Events and logs. ${uriCredentialsAdvice}`,
          reason: uriRuleReason,
        },
      ],
    },
    format: {
      type: "string",
      description:
        "Model format, e.g. tensorflow, onnx, pytorch, tensorrt, sklearn, xgboost, lightgbm, mlflow. Picks a runtime that supports it when spec.runtime is empty.",
      maxLength: 63,
      ...matching("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "a lowercase word such as tensorflow, onnx or sklearn"),
    },
    name: {
      type: "string",
      description:
        "Name the server publishes the model under (the $(MODEL_NAME) of the runtime's arguments and readiness path). Defaults to the MLModel's name. With a TensorFlow Serving model config file, set it to a model listed in that file.",
      maxLength: 253,
      ...matching(
        "^[A-Za-z0-9][A-Za-z0-9._-]*$",
        "letters, digits, '.', '_' and '-', starting with a letter or digit",
      ),
    },
    version: {
      type: "string",
      description:
        "Model version. TensorFlow Serving and Triton read versions from numbered sub-directories: the model is downloaded into <base path>/<version>, so use an integer for them.",
      maxLength: 63,
      ...matching(
        "^[A-Za-z0-9][A-Za-z0-9._-]*$",
        "letters, digits, '.', '_' and '-', starting with a letter or digit",
      ),
    },
    sha256: {
      type: "string",
      description:
        "Expected SHA-256 of the downloaded file (64 lowercase hex digits). The download fails on mismatch.",
      maxLength: 64,
      ...matching("^[a-f0-9]{64}$", "64 lowercase hexadecimal digits (the SHA-256 of the model file)"),
    },
    downloadDeadlineSeconds: {
      type: "integer",
      description:
        "Seconds the download Job may run, retries included, before it is stopped and the download reported as failed (reason DeadlineExceeded). Each request to the store is bounded too; this bounds the whole. Raise it for a model that takes longer to download.",
      minimum: 60,
      maximum: 604800,
      default: 21600,
    },
    path: {
      type: "string",
      description:
        "Path of the model inside the serving container, for a custom spec.image that already contains it (no download). Exposed to the container as MODEL_DIR.",
      maxLength: 4096,
      ...matching("^/", "an absolute path starting with /"),
    },
    credentialsSecretRef: {
      type: "object",
      description:
        "A Secret in the same namespace with credentials for the model's storage. Its keys become environment variables of the download and serving containers (e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, HF_TOKEN) and are mounted as files under /var/run/secrets/mlmodel/credentials.",
      required: ["name"],
      properties: {
        name: objectName("Name of the Secret."),
        googleCredentialsKey: {
          type: "string",
          description:
            "Key of the Secret holding a Google service-account JSON key; GOOGLE_APPLICATION_CREDENTIALS then points at its mounted file.",
          maxLength: 253,
          ...matching("^[-._a-zA-Z0-9]+$", "a key made of letters, digits, '-', '_' and '.'"),
        },
      },
    },
    configMapRef: {
      type: "object",
      description:
        "A ConfigMap key holding a TensorFlow Serving model config file (--model_config_file); it is mounted read-only and exposed as $(MODEL_CONFIG_FILE).",
      required: ["name", "key"],
      properties: {
        name: objectName("Name of the ConfigMap in the same namespace."),
        key: {
          type: "string",
          description: "Key of the ConfigMap that holds the file, e.g. models.config.",
          maxLength: 253,
          ...matching("^[-._a-zA-Z0-9]+$", "a key made of letters, digits, '-', '_' and '.'"),
        },
      },
    },
  },
} as const;

const endpointSpec = {
  type: "object",
  description: "How the model is reached: protocols, ports and the Service type.",
  default: {},
  properties: {
    protocol: {
      type: "string",
      description:
        "Protocols to expose: REST, gRPC or Both. Defaults to every protocol the runtime supports (REST for a custom image without grpcPort).",
      enum: ["REST", "gRPC", "Both"],
    },
    restPort: port(
      "Port of the REST (HTTP) API, on the container and the Service. Defaults to the runtime's.",
    ),
    grpcPort: port("Port of the gRPC API, on the container and the Service. Defaults to the runtime's."),
    serviceType: {
      type: "string",
      description: "Type of the Service: ClusterIP (in-cluster only), NodePort or LoadBalancer.",
      enum: ["ClusterIP", "NodePort", "LoadBalancer"],
      default: "ClusterIP",
    },
  },
  "x-kubernetes-validations": [
    {
      rule: "!has(self.restPort) || !has(self.grpcPort) || self.restPort != self.grpcPort",
      message: "restPort and grpcPort must differ",
      fieldPath: ".grpcPort",
      reason: "FieldValueInvalid",
    },
  ],
} as const;

const autoscalingSpec = {
  type: "object",
  description:
    "Scale between minReplicas and maxReplicas on CPU use (a HorizontalPodAutoscaler). Excludes replicas. minReplicas 0 scales the model to zero (no autoscaler: Kubernetes' autoscaler cannot scale up from zero without the alpha HPAScaleToZero gate); the Service and URL are kept.",
  required: ["maxReplicas"],
  properties: {
    minReplicas: {
      type: "integer",
      description: "Fewest replicas; 0 scales the model to zero.",
      minimum: 0,
      maximum: 1000,
      default: 1,
    },
    maxReplicas: { type: "integer", description: "Most replicas.", minimum: 1, maximum: 1000 },
    targetCPUUtilizationPercentage: {
      type: "integer",
      description: "Average CPU use, in percent of the CPU request, the autoscaler aims for.",
      minimum: 1,
      maximum: 100,
      default: 80,
    },
  },
  "x-kubernetes-validations": [
    {
      rule: "self.maxReplicas >= self.minReplicas",
      message: "maxReplicas must be greater than or equal to minReplicas",
      fieldPath: ".maxReplicas",
      reason: "FieldValueInvalid",
    },
  ],
} as const;

const resourcesSpec = {
  type: "object",
  description:
    "Compute resources of each serving replica. cpu and memory are requests; limits caps them; gpu requests whole nvidia.com/gpu devices.",
  properties: {
    cpu: quantity("CPU request, e.g. 500m or 2."),
    memory: quantity("Memory request, e.g. 1Gi."),
    gpu: {
      type: "integer",
      description: "Number of NVIDIA GPUs (nvidia.com/gpu) per replica.",
      minimum: 0,
      maximum: 64,
    },
    limits: {
      type: "object",
      description: "Upper bounds; when absent the container may use what the node has free.",
      properties: {
        cpu: quantity("CPU limit."),
        memory: quantity("Memory limit; the container is killed beyond it."),
      },
    },
  },
} as const;

const storageSpec = {
  type: "object",
  description:
    "Where a downloaded model is kept: one PersistentVolumeClaim that every replica mounts (mode Claim), or the node cache, a copy on each node that serves it (mode NodeCache). Not used for pvc:// URIs (the user's claim is mounted in place) nor for models read by the server itself. See docs/model-cache.md.",
  default: {},
  properties: {
    mode: {
      type: "string",
      description:
        "Claim: the model is downloaded once into one PersistentVolumeClaim that every replica mounts (replicas share its node with a ReadWriteOnce class). NodeCache: the node cache agents keep the model on each node that serves it, fetched from the origin once and copied between nodes; replicas spread over nodes and zones, each pod copies the model into its own emptyDir before its server starts. Auto (the default) is NodeCache when the node cache is installed, the model is downloaded (not pvc://) and accessMode is not ReadWriteMany, and the model has no claim of its own yet (an operator upgrade never moves a served model); else Claim.",
      enum: ["Auto", "Claim", "NodeCache"],
      default: "Auto",
    },
    size: {
      ...quantity(
        "Size of the claim (Claim), or the limit of each serving pod's copy and of the download's scratch space (NodeCache); must hold the unpacked model.",
      ),
      default: "10Gi",
    },
    storageClassName: objectName("StorageClass of the claim; the cluster default when empty."),
    accessMode: {
      type: "string",
      description:
        "Access mode of the claim. ReadWriteOnce works when all replicas share a node; use ReadWriteMany (or ReadOnlyMany-capable storage) to spread replicas across nodes.",
      enum: ["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"],
      default: "ReadWriteOnce",
    },
  },
  "x-kubernetes-validations": [
    {
      rule: "!has(self.mode) || self.mode != 'NodeCache' || !has(self.accessMode) || self.accessMode != 'ReadWriteMany'",
      message:
        "mode NodeCache keeps no claim, so accessMode ReadWriteMany has nothing to apply to: use mode Claim for a shared ReadWriteMany claim, or leave accessMode out",
      fieldPath: ".accessMode",
      reason: "FieldValueInvalid",
    },
  ],
} as const;

// A canary: the newest revision serves a share of the traffic beside the stable one before it
// takes all of it (docs/canary.md). trafficPercent is the common case (one split, held until
// `mlmodel promote`); steps add more splits and timed pauses.
const canaryPause = {
  type: "object",
  description:
    "How long the step's split is held once all of its replicas are ready. Without durationSeconds the split is held until `mlmodel promote NAME --step` ends this pause (or `mlmodel promote NAME` promotes the canary).",
  properties: {
    durationSeconds: {
      type: "integer",
      description: "Seconds to hold the split, counted from when the step's replicas are all ready.",
      minimum: 1,
      maximum: 604800,
    },
  },
} as const;

const canaryStep = {
  type: "object",
  description: "One split of the traffic between the stable revision and the canary.",
  required: ["trafficPercent"],
  properties: {
    trafficPercent: {
      type: "integer",
      description:
        "Percent of the traffic the canary serves during this step (1 to 100). Without a Gateway API route the split is made by replica counts and is coarse: status.canary.effectivePercent says what the replicas give.",
      minimum: 1,
      maximum: 100,
    },
    pause: canaryPause,
  },
} as const;

const gatewayParentRef = {
  type: "object",
  description:
    "A parent of the HTTPRoute (a Gateway, or one listener of it), as in the Gateway API's ParentReference.",
  required: ["name"],
  properties: {
    group: {
      type: "string",
      description: "API group of the parent; the Gateway API's default is gateway.networking.k8s.io.",
      maxLength: 253,
      ...matching(
        "^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        "an API group such as gateway.networking.k8s.io",
      ),
    },
    kind: {
      type: "string",
      description: "Kind of the parent; the Gateway API's default is Gateway.",
      maxLength: 63,
      ...matching("^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$", "a kind such as Gateway"),
    },
    namespace: objectName("Namespace of the parent; the MLModel's namespace when empty."),
    name: {
      type: "string",
      description: "Name of the parent, e.g. the Gateway's name.",
      minLength: 1,
      maxLength: 253,
    },
    sectionName: {
      type: "string",
      description:
        "Name of one listener of the Gateway to attach to; every listener that allows the route when empty.",
      maxLength: 253,
      ...matching(
        "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        "a listener name: lowercase letters, digits, '-' and '.'",
      ),
    },
    port: port("Port of the Gateway's listener to attach to."),
  },
} as const;

const canarySpec = {
  type: "object",
  description:
    "Roll a new revision out as a canary: it serves a share of the traffic beside the stable revision (trafficPercent, or steps with pauses) until it is promoted (`mlmodel promote NAME`, or the last step ends) or aborted (`mlmodel rollback NAME`, or automatically when it is unhealthy and rollout.autoRollback is on). The first revision of a model, and any revision while the model has never been ready, rolls out without a canary. See docs/canary.md.",
  properties: {
    trafficPercent: {
      type: "integer",
      description:
        "The common case: the canary serves this percent of the traffic until `mlmodel promote NAME` (100 promotes at once, so editing this to 100 promotes from Git). Same as one step with an indefinite pause. Excludes steps.",
      minimum: 1,
      maximum: 100,
    },
    steps: {
      type: "array",
      description:
        "Splits the canary goes through in order, each held for its pause; after the last step the canary is promoted. A step without pause moves on as soon as its replicas are ready. Excludes trafficPercent.",
      minItems: 1,
      maxItems: 20,
      items: canaryStep,
      "x-kubernetes-validations": [
        {
          // Two-variable comprehension: each step compared with the one before.
          rule: "self.all(i, s, i == 0 || s.trafficPercent > self[i - 1].trafficPercent)",
          message:
            "each step's trafficPercent must be greater than the step before it, e.g. 10, 25, 50: a step never takes traffic away from the canary (to go back, edit the spec or use mlmodel rollback)",
          reason: "FieldValueInvalid",
        },
      ],
    },
    maxRestarts: {
      type: "integer",
      description:
        "Restarts of the canary's containers (in total) that are tolerated; one more counts as unhealthy and aborts the canary when rollout.autoRollback is on.",
      minimum: 0,
      maximum: 1000,
      default: 2,
    },
    maxUnreadySeconds: {
      type: "integer",
      description:
        "Seconds a canary replica that was Ready may fail its readiness probe before the canary counts as unhealthy (and is aborted when rollout.autoRollback is on). A replica still loading its model is bounded by the runtime's startup probe and progressDeadlineSeconds instead.",
      minimum: 5,
      maximum: 86400,
      default: 60,
    },
    trafficRouting: {
      type: "object",
      description:
        "Exact weights instead of replica counts. Without it the split is made by replica counts behind the model's one Service, which works everywhere but is coarse.",
      properties: {
        gatewayAPI: {
          type: "object",
          description:
            "Split with a Gateway API HTTPRoute (named like the model) whose weighted backendRefs point at a stable and a canary Service, attached to these parents. Needs the Gateway API CRDs in the cluster: without them the canary waits (status.canary.reason GatewayAPIUnavailable) rather than fall back to a coarser split. The route carries the REST port.",
          required: ["parentRefs"],
          properties: {
            parentRefs: {
              type: "array",
              description: "Gateways (or listeners) the route attaches to.",
              minItems: 1,
              maxItems: 32,
              items: gatewayParentRef,
            },
            hostnames: {
              type: "array",
              description: "Host names the route matches; every host name of the listener when empty.",
              maxItems: 16,
              items: {
                type: "string",
                description: "A host name such as models.example.com, or a wildcard such as *.example.com.",
                maxLength: 253,
                ...matching(
                  "^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                  "a lowercase host name such as models.example.com or *.example.com",
                ),
              },
            },
          },
        },
      },
    },
  },
  "x-kubernetes-validations": [
    {
      rule: "!(has(self.trafficPercent) && has(self.steps))",
      message:
        "set either trafficPercent (one split, held until mlmodel promote) or steps (several splits with pauses), not both",
      fieldPath: ".steps",
      reason: "FieldValueForbidden",
    },
    {
      rule: "has(self.trafficPercent) || has(self.steps)",
      message:
        "say how much traffic the canary gets: set trafficPercent (e.g. 10) or steps (e.g. [{trafficPercent: 10, pause: {durationSeconds: 300}}, {trafficPercent: 50}])",
      fieldPath: ".trafficPercent",
      reason: "FieldValueRequired",
    },
  ],
} as const;

const rolloutSpec = {
  type: "object",
  description:
    "How a new model version or setting rolls out. The defaults keep every old replica serving until a new one is ready (no downtime).",
  default: {},
  properties: {
    maxUnavailable: {
      description: "Replicas (or percent) that may be unavailable during a rollout.",
      anyOf: [{ type: "integer" }, { type: "string" }],
      "x-kubernetes-int-or-string": true,
      default: 0,
    },
    maxSurge: {
      description: "Extra replicas (or percent) created during a rollout.",
      anyOf: [{ type: "integer" }, { type: "string" }],
      "x-kubernetes-int-or-string": true,
      default: 1,
    },
    autoRollback: {
      type: "boolean",
      description:
        "When a new revision fails (its download fails, its pods crash-loop or cannot pull their image, or the rollout passes progressDeadlineSeconds), keep or return to serving the last ready revision. The spec is left as written (status.revision.failed and the RolledBack condition show the drift); changing the spec rolls forward again. With a canary (rollout.canary) this is the canary's automatic abort: it also counts restarts beyond canary.maxRestarts and replicas unready beyond canary.maxUnreadySeconds.",
      default: true,
    },
    revisionHistoryLimit: {
      type: "integer",
      description:
        "Revisions kept (ControllerRevisions, for mlmodel history and rollback) and downloaded model versions kept in storage; the served and last ready ones are always kept.",
      minimum: 1,
      maximum: 100,
      default: 10,
    },
    progressDeadlineSeconds: {
      type: "integer",
      description:
        "Seconds a rollout may make no progress before it is reported as failed (reason ProgressDeadlineExceeded).",
      minimum: 30,
      maximum: 86400,
      default: 600,
    },
    canary: canarySpec,
  },
  "x-kubernetes-validations": [
    {
      rule: "!(has(self.maxUnavailable) && has(self.maxSurge) && self.maxUnavailable == 0 && self.maxSurge == 0)",
      message: "maxUnavailable and maxSurge cannot both be 0: the rollout could never replace a replica",
      fieldPath: ".maxSurge",
      reason: "FieldValueInvalid",
    },
  ],
} as const;

const toleration = {
  type: "object",
  description: "A toleration, as in a Pod spec.",
  properties: {
    key: {
      type: "string",
      description: "Taint key; empty with operator Exists matches every taint.",
      maxLength: 316,
    },
    operator: { type: "string", description: "Exists or Equal.", enum: ["Exists", "Equal"] },
    value: { type: "string", description: "Taint value for operator Equal.", maxLength: 63 },
    effect: {
      type: "string",
      description: "NoSchedule, PreferNoSchedule or NoExecute; empty matches all.",
      enum: ["NoSchedule", "PreferNoSchedule", "NoExecute"],
    },
    tolerationSeconds: { type: "integer", description: "For NoExecute: how long the pod stays bound." },
  },
} as const;

const placementSpec = {
  type: "object",
  description: "Where serving pods may run.",
  properties: {
    nodeSelector: {
      type: "object",
      description: "Node labels a node must have, e.g. {accelerator: nvidia-a100}.",
      additionalProperties: { type: "string" },
    },
    tolerations: { type: "array", description: "Taints the pods tolerate.", maxItems: 32, items: toleration },
    affinity: {
      type: "object",
      description:
        "Pod affinity rules, exactly as in a Pod spec (nodeAffinity, podAffinity, podAntiAffinity).",
      "x-kubernetes-preserve-unknown-fields": true,
    },
  },
} as const;

export const mlModelSpecSchema = {
  type: "object",
  description: "Desired state: a model, the runtime that serves it, and how it is exposed and scaled.",
  required: ["model"],
  properties: {
    model: modelSpec,
    runtime: objectName(
      "Name of a ServingRuntime in this namespace or a ClusterServingRuntime (built in: tensorflow-serving, triton, mlserver, torchserve). When empty, the runtime is chosen by model.format; with spec.image set, none is needed.",
    ),
    image: {
      type: "string",
      description:
        "Serving image. Overrides the runtime's image, or with no runtime runs a custom server (set command/args/env and endpoint ports).",
      minLength: 1,
      maxLength: 1024,
      ...matching(
        "^[^\\s]+$",
        "an image reference without spaces, e.g. registry.example.com/team/server:1.0",
      ),
    },
    command: stringList("Entrypoint of the serving container; replaces the runtime's."),
    args: stringList(
      "Arguments of the serving container; replace the runtime's. $(MODEL_NAME), $(MODEL_DIR), $(MODEL_VERSION), $(MODEL_CONFIG_FILE), $(REST_PORT) and $(GRPC_PORT) are expanded.",
    ),
    env: envList(
      "Extra environment variables of the serving container (added to the runtime's, same names win).",
    ),
    endpoint: endpointSpec,
    replicas: {
      type: "integer",
      description:
        "Number of serving replicas (default 1). Excludes autoscaling. Also set by `kubectl scale`.",
      minimum: 0,
      maximum: 1000,
    },
    autoscaling: autoscalingSpec,
    resources: resourcesSpec,
    storage: storageSpec,
    rollout: rolloutSpec,
    startupTimeoutSeconds: {
      type: "integer",
      description:
        "Seconds a replica may take to load the model before it is restarted (a startup probe). Large models need more; the runtime's default applies when empty.",
      minimum: 10,
      maximum: 86400,
    },
    placement: placementSpec,
    serviceAccountName: objectName("ServiceAccount of the serving pods (e.g. for workload identity)."),
  },
  "x-kubernetes-validations": [
    {
      rule: "!(has(self.replicas) && has(self.autoscaling))",
      message: "set either replicas or autoscaling, not both",
      fieldPath: ".autoscaling",
      reason: "FieldValueForbidden",
    },
    {
      rule: "has(self.model.uri) || has(self.model.configMapRef) || has(self.image)",
      message:
        "model.uri is required (or model.configMapRef for a TensorFlow Serving model config file, or image for a custom image that contains the model)",
      fieldPath: ".model.uri",
      reason: "FieldValueRequired",
    },
    {
      rule: "has(self.runtime) || has(self.model.format) || has(self.image)",
      message:
        "say how to serve the model: set model.format (e.g. tensorflow, onnx, sklearn), runtime (e.g. tensorflow-serving) or image",
      fieldPath: ".model.format",
      reason: "FieldValueRequired",
    },
    {
      rule: "!has(self.model.sha256) || (has(self.model.uri) && !self.model.uri.startsWith('pvc://'))",
      message: "model.sha256 checks a download, so it needs a model.uri that is downloaded (not pvc://)",
      fieldPath: ".model.sha256",
      reason: "FieldValueInvalid",
    },
    {
      rule: "!(has(self.rollout) && has(self.rollout.canary) && has(self.rollout.canary.trafficRouting) && has(self.rollout.canary.trafficRouting.gatewayAPI)) || !has(self.endpoint.protocol) || self.endpoint.protocol != 'gRPC'",
      message:
        "rollout.canary.trafficRouting.gatewayAPI splits the REST port with an HTTPRoute, so it needs endpoint.protocol REST or Both; for a gRPC-only model leave trafficRouting out (the split is then made by replica counts)",
      fieldPath: ".rollout.canary.trafficRouting.gatewayAPI",
      reason: "FieldValueInvalid",
    },
    {
      rule: "!has(self.storage) || !has(self.storage.mode) || self.storage.mode != 'NodeCache' || (has(self.model.uri) && !self.model.uri.startsWith('pvc://'))",
      message:
        "storage.mode NodeCache caches a downloaded model, so it needs a model.uri that is downloaded (s3://, gs://, https://, azblob://, hf://); a pvc:// model is mounted in place: use storage.mode Auto or Claim",
      fieldPath: ".storage.mode",
      reason: "FieldValueInvalid",
    },
    {
      rule: "!has(self.model.path) || has(self.image)",
      message: "model.path names a path inside a custom image: set image too, or use model.uri",
      fieldPath: ".model.path",
      reason: "FieldValueInvalid",
    },
  ],
} as const;

// Two writers share status.download (server-side apply, one field manager each): the operator
// owns job, jobState and attempts (from the Job); the downloader pod owns the progress fields
// (downloaderStatusFields in src/downloader/contract.ts), under the field manager
// "mlmodel-downloader", with a Role that allows it only that model's status.
const downloadStatus = {
  type: "object",
  description: "The model download of the current content (uri, version, sha256).",
  properties: {
    job: { type: "string", description: "Name of the download Job." },
    jobState: {
      type: "string",
      description: "State of the download Job: Pending, Running, Succeeded or Failed.",
      enum: ["Pending", "Running", "Succeeded", "Failed"],
    },
    attempts: { type: "integer", description: "Download pods started so far." },
    phase: {
      type: "string",
      description: "Progress reported by the downloader.",
      enum: ["Downloading", "Verifying", "Extracting", "Complete", "Failed"],
    },
    bytesDone: { type: "integer", description: "Bytes on disk so far." },
    bytesTotal: { type: "integer", description: "Bytes expected, when the source says." },
    bytesPerSecond: { type: "number", description: "Recent transfer rate." },
    filesDone: { type: "integer", description: "Files complete." },
    filesTotal: { type: "integer", description: "Files expected, when known." },
    startedAt: { type: "string", format: "date-time", description: "When the download started." },
    updatedAt: { type: "string", format: "date-time", description: "When progress was last reported." },
    finishedAt: { type: "string", format: "date-time", description: "When it finished." },
    message: { type: "string", description: "The downloader's failure message." },
    progress: {
      type: "string",
      maxLength: 120,
      description:
        'One human line written by the downloader, shown in the Download column of kubectl get mlm: "34% 412Mi/1.2Gi 56Mi/s", "412Mi 56Mi/s" (size unknown), "verifying 1.2Gi", "100% 1.2Gi" or "failed at 34% 412Mi/1.2Gi".',
    },
  },
} as const;

const revisionStatus = {
  type: "object",
  description:
    "Revisions of what is served. A revision is a hash of everything that changes the serving pods; a new one rolls out without downtime.",
  properties: {
    current: { type: "string", description: "Revision the operator is rolling out or serving." },
    currentNumber: {
      type: "integer",
      description: "Number of the current revision (its ControllerRevision's revision; see mlmodel history).",
    },
    lastReady: { type: "string", description: "Last revision that was fully ready." },
    lastReadyNumber: { type: "integer", description: "Number of the last ready revision." },
    rollingOut: {
      type: "string",
      description: "The revision being rolled out (not yet ready); absent when the current revision serves.",
    },
    failed: {
      type: "object",
      description:
        "The revision of the spec as written, when it failed and the operator rolled back to the last ready one (spec.rollout.autoRollback). Cleared when the spec changes.",
      properties: {
        revision: { type: "string", description: "Hash of the failed revision." },
        number: { type: "integer", description: "Number of the failed revision (mlmodel history)." },
        reason: { type: "string", description: "Why it failed, e.g. DownloadFailed, CrashLoopBackOff." },
        message: { type: "string", description: "What failed, as the status said then." },
        at: { type: "string", format: "date-time", description: "When the operator rolled back." },
      },
    },
    serving: {
      type: "array",
      description:
        "Each revision serving now: one outside a canary, the stable one and the canary during one (see status.canary).",
      maxItems: 2,
      items: {
        type: "object",
        required: ["revision", "role"],
        properties: {
          revision: { type: "string", description: "The revision hash." },
          number: { type: "integer", description: "Its number (mlmodel history)." },
          role: {
            type: "string",
            description: "Stable (serves the rest of the traffic) or Canary.",
            enum: ["Stable", "Canary"],
          },
          replicas: { type: "integer", description: "Its serving pods." },
          readyReplicas: { type: "integer", description: "Its ready serving pods." },
          trafficPercent: {
            type: "integer",
            description:
              "Its share of the traffic now: its share of the ready replicas when the split is made by replicas, its HTTPRoute weight with the Gateway API.",
          },
        },
      },
    },
    history: {
      type: "array",
      description: "Recent revisions, newest first (at most 10).",
      maxItems: 10,
      items: {
        type: "object",
        required: ["revision"],
        properties: {
          revision: { type: "string", description: "The revision hash." },
          modelURI: { type: "string", description: "spec.model.uri of that revision." },
          modelVersion: { type: "string", description: "spec.model.version of that revision." },
          image: { type: "string", description: "Serving image of that revision." },
          readyAt: { type: "string", format: "date-time", description: "When it first became ready." },
        },
      },
    },
  },
} as const;

const canaryStatus = {
  type: "object",
  description:
    "The canary of the newest revision (spec.rollout.canary) while it runs, then how it ended (until the next one starts). See docs/canary.md.",
  properties: {
    revision: { type: "string", description: "Revision the canary serves (the spec's)." },
    revisionNumber: { type: "integer", description: "Number of that revision (mlmodel history)." },
    stableRevision: { type: "string", description: "Revision serving the rest of the traffic." },
    stableRevisionNumber: { type: "integer", description: "Number of the stable revision." },
    phase: {
      type: "string",
      description:
        "Waiting (cannot start: see reason), Progressing (moving to the step's split), Paused (holding it), Promoting (the canary's revision replaces the stable one), Promoted, Aborting (the stable revision takes all traffic back) or Aborted.",
      enum: ["Waiting", "Progressing", "Paused", "Promoting", "Promoted", "Aborting", "Aborted"],
    },
    reason: {
      type: "string",
      description: "CamelCase reason of the phase, e.g. StepPaused, PromotedByUser, CrashLoopBackOff.",
    },
    message: { type: "string", description: "What the canary is doing or why it ended, for a person." },
    step: { type: "integer", description: "Index of the current step, from 0." },
    steps: { type: "integer", description: "Number of steps (1 for trafficPercent)." },
    stepsHash: {
      type: "string",
      description: "Hash of the steps the canary runs; editing the steps starts it again from step 0.",
    },
    trafficPercent: { type: "integer", description: "Percent of the traffic the current step asks for." },
    effectivePercent: {
      type: "integer",
      description:
        "Percent of the traffic the canary gets once the step's replicas are ready (rounded): equal to trafficPercent with the Gateway API, the nearest the replica counts allow otherwise.",
    },
    exact: { type: "boolean", description: "Whether effectivePercent is exactly trafficPercent." },
    mode: {
      type: "string",
      description:
        "How the traffic is split: Replicas (stable and canary Deployments behind the model's Service, coarse) or GatewayAPI (HTTPRoute weights, exact).",
      enum: ["Replicas", "GatewayAPI"],
    },
    startedAt: { type: "string", format: "date-time", description: "When the canary started." },
    stepStartedAt: { type: "string", format: "date-time", description: "When the current step started." },
    stepReadyAt: {
      type: "string",
      format: "date-time",
      description: "When the current step's replicas were all ready (its pause counts from here).",
    },
    pauseEndsAt: {
      type: "string",
      format: "date-time",
      description: "When the current step's timed pause ends.",
    },
    finishedAt: { type: "string", format: "date-time", description: "When it was promoted or aborted." },
    stableURL: { type: "string", description: "In-cluster URL that reaches the stable revision alone." },
    canaryURL: { type: "string", description: "In-cluster URL that reaches the canary alone." },
    summary: {
      type: "string",
      maxLength: 120,
      description:
        'One line for the Canary column of kubectl get mlm while a canary runs, e.g. "rev 4 at 20% (step 1/3, paused)".',
    },
  },
} as const;

const nodeCacheStatus = {
  type: "object",
  description:
    "The model's version in the node cache (storage mode NodeCache), as the node cache agents report it in their state ConfigMaps. See docs/model-cache.md.",
  properties: {
    key: {
      type: "string",
      description:
        "Cache key of the version being served or rolled out: a hash of its exact URI and sha256 (two models with both the same share one entry). Serving pods carry it as label serving.mlmodel.dev/cache-key.",
    },
    url: { type: "string", description: "URL of the node cache the pods use (its Service)." },
    nodes: {
      type: "array",
      description: "Each node whose agent holds the key, by node name.",
      maxItems: 1000,
      items: {
        type: "object",
        required: ["node"],
        properties: {
          node: { type: "string", description: "Name of the node." },
          size: { type: "integer", description: "Bytes of the entry on that node." },
          files: { type: "integer", description: "Files of the entry." },
          source: {
            type: "string",
            description:
              "Where the node got it: Origin (a download Job on that node fetched it) or Peer (copied from another node's agent).",
            enum: ["Origin", "Peer"],
          },
          peer: { type: "string", description: "The node it was copied from, when source is Peer." },
          inUse: {
            type: "boolean",
            description: "A pod on that node serves it: the agent never evicts it while true.",
          },
          completedAt: { type: "string", format: "date-time", description: "When the entry was complete." },
        },
      },
    },
    nodesCached: { type: "integer", description: "Nodes whose agent holds the key." },
    bytesFromOrigin: {
      type: "integer",
      description: "Bytes of this entry fetched from the origin, summed over the nodes that report it.",
    },
    bytesFromPeers: {
      type: "integer",
      description: "Bytes of this entry copied from other nodes, summed over the nodes that report it.",
    },
    fill: {
      type: "object",
      description:
        "The copies of this entry under way, summed over the nodes whose agents report them: into a node's cache from a peer, and out of a node's cache into a serving pod. Absent when none is.",
      properties: {
        nodes: { type: "integer", description: "Nodes with a copy under way." },
        copies: { type: "integer", description: "Copies under way." },
        bytesDone: { type: "integer", description: "Bytes copied so far." },
        bytesTotal: { type: "integer", description: "Bytes the copies move in all (the entry's size each)." },
        bytesPerSecond: { type: "number", description: "The copies' rates, summed." },
      },
    },
    progress: {
      type: "string",
      maxLength: 120,
      description:
        'One line for the Cache column of kubectl get mlm while copies are under way, e.g. "3 copies on 2 nodes: 45% 1.8Mi/4.0Mi 12Mi/s".',
    },
  },
} as const;

export const mlModelStatusSchema = {
  type: "object",
  description:
    "Observed state, written by the operator, except the progress fields of download, which the download Job writes.",
  properties: {
    phase: {
      type: "string",
      description:
        "Pending (waiting for a runtime, a Secret, a ConfigMap or storage), Downloading, Deploying, Ready (every desired replica of the current revision is ready), Failed (needs a person: see message and conditions) or Terminating.",
      enum: ["Pending", "Downloading", "Deploying", "Ready", "Failed", "Terminating"],
    },
    reason: { type: "string", description: "CamelCase reason of the phase, e.g. ImagePullBackOff." },
    message: { type: "string", description: "What is happening, or what is wrong and how to fix it." },
    conditions,
    observedGeneration: {
      type: "integer",
      format: "int64",
      description: "The metadata.generation this status describes.",
    },
    replicas: { type: "integer", description: "Serving pods that exist (all revisions)." },
    readyReplicas: { type: "integer", description: "Serving pods that are ready." },
    updatedReplicas: { type: "integer", description: "Serving pods of the current revision." },
    selector: {
      type: "string",
      description: "Label selector of the serving pods (for the scale subresource).",
    },
    runtime: { type: "string", description: "The runtime serving the model: Kind/name, or custom." },
    modelVersion: { type: "string", description: "spec.model.version being served." },
    url: { type: "string", description: "In-cluster URL of the model's primary endpoint." },
    restURL: { type: "string", description: "In-cluster URL of the REST API." },
    grpcURL: { type: "string", description: "In-cluster address of the gRPC API." },
    download: downloadStatus,
    revision: revisionStatus,
    canary: canaryStatus,
    storageMode: {
      type: "string",
      description:
        "The storage mode in use (spec.storage.mode with Auto resolved): Claim or NodeCache; absent when nothing is downloaded.",
      enum: ["Claim", "NodeCache"],
    },
    cache: nodeCacheStatus,
  },
} as const;

export type MLModelSpec = FromSchema<typeof mlModelSpecSchema>;
/** The spec after the API server's defaulting: what the operator works with. */
export type DefaultedMLModelSpec = FromSchema<typeof mlModelSpecSchema, "defaulted">;
export type MLModelStatus = FromSchema<typeof mlModelStatusSchema>;
export type MLModel = KubeObjectOf<"MLModel", MLModelSpec, MLModelStatus>;
export type Condition = NonNullable<MLModelStatus["conditions"]>[number];
export type Phase = NonNullable<MLModelStatus["phase"]>;
export type CanarySpec = NonNullable<NonNullable<MLModelSpec["rollout"]>["canary"]>;
export type CanaryStatus = NonNullable<MLModelStatus["canary"]>;
export type NodeCacheStatus = NonNullable<MLModelStatus["cache"]>;
export type StorageMode = NonNullable<NonNullable<MLModelSpec["storage"]>["mode"]>;
export type ServingRevision = NonNullable<NonNullable<MLModelStatus["revision"]>["serving"]>[number];
