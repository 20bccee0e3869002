/**
 * The CustomResourceDefinitions, built from the schemas. `node src/install/generate.ts` writes
 * them to deploy/crds; test/unit/install/manifests.test.ts fails when those files are stale.
 */
import type { ResourceKind } from "../runtime/index.ts";
import { group } from "./fragments.ts";
import { clusterServingRuntimeKind, mlModelKind, servingRuntimeKind } from "./kinds.ts";
import { mlModelSpecSchema, mlModelStatusSchema } from "./mlmodel.ts";
import type { SchemaNode } from "./schema-types.ts";
import { servingRuntimeSpecSchema } from "./servingruntime.ts";

interface PrinterColumn {
  name: string;
  type: "string" | "integer" | "date";
  jsonPath: string;
  description: string;
  priority?: number;
}

interface CrdInput {
  kind: ResourceKind;
  singular: string;
  shortNames: string[];
  categories: string[];
  description: string;
  spec: SchemaNode;
  status?: SchemaNode;
  printerColumns: PrinterColumn[];
  /** CEL rules on the whole object (the only place metadata.name can be validated). */
  rootValidations?: { rule: string; message: string; fieldPath?: string; reason?: string }[];
  scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath: string };
}

export interface CustomResourceDefinition {
  apiVersion: "apiextensions.k8s.io/v1";
  kind: "CustomResourceDefinition";
  metadata: { name: string; labels: Record<string, string> };
  spec: Record<string, unknown>;
}

function crd(input: CrdInput): CustomResourceDefinition {
  const properties: Record<string, unknown> = {
    apiVersion: {
      type: "string",
      description: "Versioned schema of this representation of an object.",
    },
    kind: { type: "string", description: "REST resource this object represents." },
    metadata: { type: "object" },
    spec: input.spec,
  };
  if (input.status) properties.status = input.status;
  const subresources: Record<string, unknown> = {};
  if (input.status) subresources.status = {};
  if (input.scale) subresources.scale = input.scale;
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: {
      name: `${input.kind.plural}.${group}`,
      labels: { "app.kubernetes.io/part-of": "mlmodel-operator" },
    },
    spec: {
      group,
      names: {
        kind: input.kind.kind,
        listKind: `${input.kind.kind}List`,
        plural: input.kind.plural,
        singular: input.singular,
        shortNames: input.shortNames,
        categories: input.categories,
      },
      scope: input.kind.namespaced ? "Namespaced" : "Cluster",
      versions: [
        {
          name: input.kind.version,
          served: true,
          storage: true,
          schema: {
            openAPIV3Schema: {
              type: "object",
              description: input.description,
              required: ["spec"],
              properties,
              ...(input.rootValidations ? { "x-kubernetes-validations": input.rootValidations } : {}),
            },
          },
          subresources,
          additionalPrinterColumns: input.printerColumns,
        },
      ],
    },
  };
}

const age: PrinterColumn = {
  name: "Age",
  type: "date",
  jsonPath: ".metadata.creationTimestamp",
  description: "Time since creation.",
};

export const mlModelCrd = crd({
  kind: mlModelKind,
  singular: "mlmodel",
  shortNames: ["mlm"],
  categories: ["mlmodel", "all"],
  description:
    "MLModel serves one machine-learning model: the operator downloads it into storage with a Job, runs a serving runtime (TensorFlow Serving, Triton, MLServer, TorchServe or a custom image) in a Deployment behind a Service, and reports truthful status.",
  spec: mlModelSpecSchema,
  status: mlModelStatusSchema,
  rootValidations: [
    {
      // The name becomes the Service's (a DNS-1035 label) and, with a 14-character suffix,
      // the download Job's (at most 63).
      // (A pattern on the name is too costly for the CEL budget; the operator reports a
      // name that is not a DNS-1035 label in status.)
      rule: "self.metadata.name.size() <= 48",
      message: "metadata.name must be at most 48 characters: it names the model's Service and download Job",
      reason: "FieldValueInvalid",
    },
  ],
  printerColumns: [
    { name: "Phase", type: "string", jsonPath: ".status.phase", description: "Lifecycle phase." },
    {
      name: "Ready",
      type: "integer",
      jsonPath: ".status.readyReplicas",
      description: "Ready serving replicas.",
    },
    { name: "Replicas", type: "integer", jsonPath: ".status.replicas", description: "Serving replicas." },
    {
      name: "Download",
      type: "string",
      jsonPath: ".status.download.progress",
      description: "Download progress reported by the download Job: percent, bytes, rate.",
    },
    { name: "URL", type: "string", jsonPath: ".status.url", description: "In-cluster URL." },
    {
      name: "Version",
      type: "string",
      jsonPath: ".status.modelVersion",
      description: "Model version served.",
    },
    {
      name: "Canary",
      type: "string",
      jsonPath: ".status.canary.summary",
      description: "The canary while one runs: revision, traffic share and step.",
    },
    {
      name: "Cache",
      type: "string",
      jsonPath: ".status.cache.progress",
      description:
        "While the node cache copies the model onto nodes and into pods: copies, nodes, percent, bytes and rate summed over the nodes.",
    },
    {
      name: "Runtime",
      type: "string",
      jsonPath: ".status.runtime",
      description: "Serving runtime.",
      priority: 1,
    },
    {
      name: "Reason",
      type: "string",
      jsonPath: ".status.reason",
      description: "Why, when not Ready.",
      priority: 1,
    },
    age,
  ],
  scale: {
    specReplicasPath: ".spec.replicas",
    statusReplicasPath: ".status.replicas",
    labelSelectorPath: ".status.selector",
  },
});

const runtimeColumns: PrinterColumn[] = [
  { name: "Image", type: "string", jsonPath: ".spec.image", description: "Server image." },
  {
    name: "Formats",
    type: "string",
    jsonPath: ".spec.supportedModelFormats[*].name",
    description: "Model formats served.",
  },
  age,
];

export const servingRuntimeCrd = crd({
  kind: servingRuntimeKind,
  singular: "servingruntime",
  shortNames: ["srt"],
  categories: ["mlmodel"],
  description: "ServingRuntime describes, for this namespace, how to serve some model formats.",
  spec: servingRuntimeSpecSchema,
  printerColumns: runtimeColumns,
});

export const clusterServingRuntimeCrd = crd({
  kind: clusterServingRuntimeKind,
  singular: "clusterservingruntime",
  shortNames: ["csrt"],
  categories: ["mlmodel"],
  description: "ClusterServingRuntime describes, for every namespace, how to serve some model formats.",
  spec: servingRuntimeSpecSchema,
  printerColumns: runtimeColumns,
});

export const allCrds = [mlModelCrd, servingRuntimeCrd, clusterServingRuntimeCrd];
