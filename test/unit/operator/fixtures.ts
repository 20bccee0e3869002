import type { V1Deployment, V1Pod } from "@kubernetes/client-node";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { builtinRuntimes } from "../../../src/install/builtin-runtimes.ts";
import { labels } from "../../../src/operator/names.ts";

export function model(spec: MLModelSpec, name = "resnet"): MLModel {
  return {
    apiVersion: "serving.mlmodel.dev/v1alpha1",
    kind: "MLModel",
    metadata: { name, namespace: "ml", uid: "uid-1", generation: 1 },
    spec,
  };
}

export const runtimes = builtinRuntimes;
export const tfServing = builtinRuntimes.find((r) => r.metadata.name === "tensorflow-serving")!;
/** TensorFlow Serving as resolveRuntime returns it, for planModel. */
export const tf = { ref: "ClusterServingRuntime/tensorflow-serving", spec: tfServing.spec };
/** The controller owner reference of model() ("resnet", uid-1). */
export const owner = {
  apiVersion: "serving.mlmodel.dev/v1alpha1",
  kind: "MLModel",
  name: "resnet",
  uid: "uid-1",
  controller: true,
};

export function pod(
  name: string,
  revision: string,
  opts: { ready?: boolean; waiting?: string; unschedulable?: string } = {},
): V1Pod {
  return {
    metadata: {
      name,
      labels: { [labels.model]: "resnet", [labels.component]: "server", [labels.revision]: revision },
    },
    status: {
      conditions: [
        { type: "Ready", status: opts.ready ? "True" : "False" },
        ...(opts.unschedulable
          ? [{ type: "PodScheduled", status: "False", reason: "Unschedulable", message: opts.unschedulable }]
          : []),
      ],
      containerStatuses: opts.waiting
        ? [
            {
              name: "server",
              image: "img",
              imageID: "",
              ready: false,
              restartCount: 4,
              state: { waiting: { reason: opts.waiting, message: "back-off" } },
              lastState: { terminated: { exitCode: 137, reason: "Error", message: "out of memory" } },
            },
          ]
        : [],
    },
  } as V1Pod;
}

export function deployment(
  replicas: number,
  ready: number,
  extra: Partial<V1Deployment["status"]> = {},
): V1Deployment {
  return {
    metadata: { name: "resnet", generation: 2 },
    spec: { replicas, selector: {}, template: {} },
    status: {
      observedGeneration: 2,
      replicas,
      updatedReplicas: replicas,
      readyReplicas: ready,
      availableReplicas: ready,
      ...extra,
    },
  };
}
