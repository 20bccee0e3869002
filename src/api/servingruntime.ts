/**
 * ServingRuntime (namespaced) and ClusterServingRuntime (cluster-wide) share one spec: how to
 * run a server for some model formats. The built-in runtimes in deploy/runtimes are instances.
 */
import { envList, matching, port, quantity, stringList } from "./fragments.ts";
import type { KubeObjectOf } from "./object.ts";
import type { FromSchema } from "./schema-types.ts";

export const servingRuntimeSpecSchema = {
  type: "object",
  description:
    "How to serve some model formats: the image, its arguments and ports, and how to tell it is ready. Arguments may use $(MODEL_NAME), $(MODEL_DIR) (the base path holding the model), $(MODEL_VERSION), $(MODEL_CONFIG_FILE), $(REST_PORT) and $(GRPC_PORT), which Kubernetes expands from the container's environment.",
  required: ["image", "supportedModelFormats", "protocols"],
  properties: {
    supportedModelFormats: {
      type: "array",
      description: "Model formats this runtime serves.",
      minItems: 1,
      maxItems: 32,
      "x-kubernetes-list-type": "map",
      "x-kubernetes-list-map-keys": ["name"],
      items: {
        type: "object",
        required: ["name"],
        properties: {
          name: {
            type: "string",
            description: "Format name as written in MLModel spec.model.format, e.g. tensorflow.",
            maxLength: 63,
            ...matching(
              "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
              "a lowercase word such as tensorflow, onnx or sklearn",
            ),
          },
          autoSelect: {
            type: "boolean",
            description: "Whether MLModels that give only a format may be served by this runtime.",
            default: true,
          },
          priority: {
            type: "integer",
            description:
              "Among runtimes that auto-select a format, the highest priority wins (ties: by name).",
            minimum: 0,
            maximum: 1000,
            default: 0,
          },
        },
      },
    },
    protocols: {
      type: "array",
      description: "Protocols the server speaks.",
      minItems: 1,
      maxItems: 2,
      "x-kubernetes-list-type": "set",
      items: { type: "string", enum: ["REST", "gRPC"] },
    },
    image: {
      type: "string",
      description: "Container image of the server.",
      minLength: 1,
      maxLength: 1024,
      ...matching("^[^\\s]+$", "an image reference without spaces"),
    },
    command: stringList("Entrypoint; the image's when empty."),
    args: stringList("Arguments always passed."),
    modelArgs: stringList(
      "Arguments added when one model is served from $(MODEL_DIR) (a downloaded, mounted or built-in model).",
    ),
    modelConfigArgs: stringList(
      "Arguments added instead of modelArgs when the MLModel gives a model config file (model.configMapRef), mounted at $(MODEL_CONFIG_FILE).",
    ),
    env: envList("Environment of the server."),
    restPort: port("Container port of the REST API (required when protocols has REST)."),
    grpcPort: port("Container port of the gRPC API (required when protocols has gRPC)."),
    modelMountPath: {
      type: "string",
      description: "Directory the model storage is mounted at.",
      ...matching("^/", "an absolute path starting with /"),
      maxLength: 1024,
      default: "/mnt/models",
    },
    readinessPath: {
      type: "string",
      description:
        "HTTP path on the REST port that answers 200 when the model is loaded, e.g. /v1/models/$(MODEL_NAME). When empty, readiness is a TCP check of the first serving port.",
      maxLength: 1024,
      ...matching("^/", "an absolute path starting with /"),
    },
    startupTimeoutSeconds: {
      type: "integer",
      description:
        "Default time a replica may take to load its model before it is restarted; MLModel spec.startupTimeoutSeconds overrides it.",
      minimum: 10,
      maximum: 86400,
      default: 600,
    },
    runAsUser: {
      type: "integer",
      description: "Non-root user id the server runs as (pods meet the restricted Pod Security level).",
      minimum: 1,
      default: 1000,
    },
    resources: {
      type: "object",
      description: "Default requests for an MLModel that sets none.",
      properties: { cpu: quantity("CPU request."), memory: quantity("Memory request.") },
    },
  },
  "x-kubernetes-validations": [
    {
      rule: "!('REST' in self.protocols) || has(self.restPort)",
      message: "restPort is required when protocols includes REST",
      fieldPath: ".restPort",
      reason: "FieldValueRequired",
    },
    {
      rule: "!('gRPC' in self.protocols) || has(self.grpcPort)",
      message: "grpcPort is required when protocols includes gRPC",
      fieldPath: ".grpcPort",
      reason: "FieldValueRequired",
    },
  ],
} as const;

export type ServingRuntimeSpec = FromSchema<typeof servingRuntimeSpecSchema>;
export type ServingRuntime = KubeObjectOf<"ServingRuntime", ServingRuntimeSpec>;
export type ClusterServingRuntime = KubeObjectOf<"ClusterServingRuntime", ServingRuntimeSpec>;
export type AnyServingRuntime = ServingRuntime | ClusterServingRuntime;
