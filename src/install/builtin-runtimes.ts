/**
 * The ClusterServingRuntimes `mlmodel install` ships (written to deploy/runtimes). Typed by the
 * schema-derived ServingRuntimeSpec, validated again by the API server when installed.
 */
import { apiVersion } from "../api/fragments.ts";
import type { ClusterServingRuntime, ServingRuntimeSpec } from "../api/servingruntime.ts";

function clusterRuntime(name: string, spec: ServingRuntimeSpec): ClusterServingRuntime {
  return {
    apiVersion,
    kind: "ClusterServingRuntime",
    metadata: { name, labels: { "app.kubernetes.io/part-of": "mlmodel-operator" } },
    spec,
  };
}

export const builtinRuntimes: ClusterServingRuntime[] = [
  // TensorFlow Serving reads <base path>/<version>/saved_model.pb and polls the base path for
  // new versions; with a model config file (the tfserving-operator design) it reads the
  // listed base paths itself, including gs:// ones with GOOGLE_APPLICATION_CREDENTIALS.
  clusterRuntime("tensorflow-serving", {
    supportedModelFormats: [{ name: "tensorflow", autoSelect: true, priority: 10 }],
    protocols: ["REST", "gRPC"],
    image: "docker.io/tensorflow/serving:2.18.0",
    command: ["tensorflow_model_server"],
    args: ["--port=$(GRPC_PORT)", "--rest_api_port=$(REST_PORT)"],
    modelArgs: ["--model_name=$(MODEL_NAME)", "--model_base_path=$(MODEL_DIR)"],
    modelConfigArgs: ["--model_config_file=$(MODEL_CONFIG_FILE)"],
    restPort: 8501,
    grpcPort: 8500,
    readinessPath: "/v1/models/$(MODEL_NAME)",
    startupTimeoutSeconds: 600,
    runAsUser: 1000,
  }),
  // Triton serves a model repository: <repo>/<model name>/<version>/model.*.
  clusterRuntime("triton", {
    supportedModelFormats: [
      { name: "onnx", autoSelect: true, priority: 10 },
      { name: "tensorrt", autoSelect: true, priority: 10 },
      { name: "triton", autoSelect: true, priority: 10 },
      { name: "pytorch", autoSelect: false, priority: 0 },
      { name: "tensorflow", autoSelect: false, priority: 0 },
    ],
    protocols: ["REST", "gRPC"],
    image: "nvcr.io/nvidia/tritonserver:24.12-py3",
    command: ["tritonserver"],
    args: ["--http-port=$(REST_PORT)", "--grpc-port=$(GRPC_PORT)", "--allow-metrics=false"],
    modelArgs: ["--model-repository=$(MODEL_DIR)"],
    restPort: 8000,
    grpcPort: 8001,
    readinessPath: "/v2/health/ready",
    startupTimeoutSeconds: 900,
    runAsUser: 1000,
  }),
  // MLServer loads the model-settings.json found under the model folder and serves the model
  // under the name it gives, which must be the MLModel's spec.model.name (default: its name).
  clusterRuntime("mlserver", {
    supportedModelFormats: [
      { name: "sklearn", autoSelect: true, priority: 10 },
      { name: "xgboost", autoSelect: true, priority: 10 },
      { name: "lightgbm", autoSelect: true, priority: 10 },
      { name: "mlflow", autoSelect: true, priority: 10 },
    ],
    protocols: ["REST", "gRPC"],
    image: "docker.io/seldonio/mlserver:1.6.1",
    command: ["mlserver", "start"],
    modelArgs: ["$(MODEL_DIR)"],
    env: [
      { name: "MLSERVER_HTTP_PORT", value: "$(REST_PORT)" },
      { name: "MLSERVER_GRPC_PORT", value: "$(GRPC_PORT)" },
      { name: "MLSERVER_METRICS_PORT", value: "8082" },
    ],
    restPort: 8080,
    grpcPort: 8081,
    // The model's own readiness, not the server's: /v2/health/ready is "every loaded model is
    // ready", true for a moment with none loaded. Seen on a real pod: a model MLServer could not
    // load answered 200 there for 0.2 s before the server exited 0, long enough for the pod to
    // turn Ready and the broken revision to count as ready (so it could not be rolled back).
    readinessPath: "/v2/models/$(MODEL_NAME)/ready",
    startupTimeoutSeconds: 600,
    runAsUser: 1000,
  }),
  // TorchServe serves the .mar archives of a model store. Its image's config.properties binds
  // the inference API to 8080 and gRPC to 7070, so those are the ports.
  clusterRuntime("torchserve", {
    supportedModelFormats: [{ name: "pytorch", autoSelect: true, priority: 10 }],
    protocols: ["REST", "gRPC"],
    image: "docker.io/pytorch/torchserve:0.12.0-cpu",
    command: ["torchserve"],
    args: ["--start", "--foreground", "--disable-token-auth", "--models", "all"],
    modelArgs: ["--model-store", "$(MODEL_DIR)"],
    restPort: 8080,
    grpcPort: 7070,
    readinessPath: "/ping",
    startupTimeoutSeconds: 600,
    runAsUser: 1000,
  }),
];
