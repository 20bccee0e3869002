/** MLModels shaped as the operator writes them (field for field from src/operator/status.ts). */
import type { MLModel } from "../../../src/api/mlmodel.ts";

export const now = new Date("2026-11-21T12:00:00Z");

function model(name: string, spec: MLModel["spec"], status: MLModel["status"], generation = 1): MLModel {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: {
      name,
      namespace: "models",
      generation,
      uid: `uid-${name}`,
      creationTimestamp: "2026-11-21T11:55:00Z",
    },
    spec,
    status,
  };
}

const condition = (type: string, status: "True" | "False" | "Unknown", reason: string, message: string) => ({
  type,
  status,
  reason,
  message,
  observedGeneration: 1,
  lastTransitionTime: "2026-11-21T11:58:00Z",
});

export const readyModel = model(
  "resnet",
  {
    model: { uri: "https://models.example.com/resnet.tar.gz", format: "tensorflow", version: "1" },
    replicas: 2,
  },
  {
    phase: "Ready",
    reason: "Serving",
    message: "2 replica(s) ready at http://resnet.models.svc:8501",
    observedGeneration: 1,
    replicas: 2,
    readyReplicas: 2,
    updatedReplicas: 2,
    runtime: "ClusterServingRuntime/tensorflow-serving",
    url: "http://resnet.models.svc:8501",
    restURL: "http://resnet.models.svc:8501",
    grpcURL: "resnet.models.svc:8500",
    download: {
      job: "resnet-dl-0a1b2c3d4e",
      jobState: "Succeeded",
      attempts: 1,
      bytesDone: 104857600,
      bytesTotal: 104857600,
    },
    revision: {
      current: "5f4e3d2c1b",
      lastReady: "5f4e3d2c1b",
      history: [
        {
          revision: "5f4e3d2c1b",
          modelURI: "https://models.example.com/resnet.tar.gz",
          modelVersion: "1",
          image: "tensorflow/serving:2.16.1",
          readyAt: "2026-11-21T11:58:00Z",
        },
      ],
    },
    conditions: [
      condition("Ready", "True", "Serving", "2 replica(s) ready at http://resnet.models.svc:8501"),
      condition("RuntimeResolved", "True", "Resolved", "served by ClusterServingRuntime/tensorflow-serving"),
      condition("DependenciesReady", "True", "Found", "referenced Secrets, ConfigMaps and claims exist"),
      condition("StorageReady", "True", "Bound", "claim resnet-model is bound"),
      condition(
        "ModelDownloaded",
        "True",
        "Downloaded",
        "https://models.example.com/resnet.tar.gz is in /mnt/models/1",
      ),
      condition("ServingReady", "True", "ReplicasReady", "2 of 2 replicas ready"),
    ],
  },
);

const failedMessage =
  "download of s3://bucket/bert failed after 2 attempt(s) (BackoffLimitExceeded): AccessDenied: the credentials in Secret s3-creds cannot read s3://bucket/bert. Fix the cause (URI, credentials) and the download is retried";

export const failedModel = model(
  "bert",
  { model: { uri: "s3://bucket/bert", format: "onnx" } },
  {
    phase: "Failed",
    reason: "DownloadFailed",
    message: failedMessage,
    observedGeneration: 1,
    replicas: 0,
    readyReplicas: 0,
    updatedReplicas: 0,
    runtime: "ClusterServingRuntime/triton",
    download: { job: "bert-dl-99aa88bb77", jobState: "Failed", attempts: 2, message: "AccessDenied" },
    conditions: [
      condition("Ready", "False", "DownloadFailed", failedMessage),
      condition("RuntimeResolved", "True", "Resolved", "served by ClusterServingRuntime/triton"),
      condition("DependenciesReady", "True", "Found", "referenced Secrets, ConfigMaps and claims exist"),
      condition("StorageReady", "False", "ClaimPending", "claim bert-model is waiting for a volume"),
      condition("ModelDownloaded", "False", "DownloadFailed", failedMessage.replace(/\. Fix.*/, "")),
    ],
  },
);

export const downloadingModel = model(
  "llama",
  { model: { uri: "hf://meta/llama", format: "mlflow" }, autoscaling: { minReplicas: 2, maxReplicas: 4 } },
  {
    phase: "Downloading",
    reason: "Downloading",
    message: "Job llama-dl-1234567890 is downloading hf://meta/llama",
    observedGeneration: 1,
    download: {
      job: "llama-dl-1234567890",
      jobState: "Running",
      attempts: 1,
      phase: "Downloading",
      bytesDone: 1073741824,
      bytesTotal: 2147483648,
    },
    conditions: [
      condition("Ready", "False", "Downloading", "Job llama-dl-1234567890 is downloading hf://meta/llama"),
      condition(
        "ModelDownloaded",
        "False",
        "Downloading",
        "Job llama-dl-1234567890 is downloading hf://meta/llama",
      ),
    ],
  },
);

/** Spec changed (generation 2) and the operator has not written status for it yet. */
export const staleModel = model("stale", readyModel.spec, readyModel.status, 2);
export const newModel = model("fresh", { model: { uri: "gs://b/m", format: "sklearn" } }, undefined);
