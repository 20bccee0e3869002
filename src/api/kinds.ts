import type { ResourceKind } from "../runtime/index.ts";
import { group, version } from "./fragments.ts";

/** The kinds this operator defines, as the runtime addresses them. */
export const mlModelKind: ResourceKind = Object.freeze({
  group,
  version,
  kind: "MLModel",
  plural: "mlmodels",
  namespaced: true,
});

export const servingRuntimeKind: ResourceKind = Object.freeze({
  group,
  version,
  kind: "ServingRuntime",
  plural: "servingruntimes",
  namespaced: true,
});

export const clusterServingRuntimeKind: ResourceKind = Object.freeze({
  group,
  version,
  kind: "ClusterServingRuntime",
  plural: "clusterservingruntimes",
  namespaced: false,
});
