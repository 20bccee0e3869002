/**
 * Schema fragments shared by the MLModel and ServingRuntime schemas. Each is a structural
 * OpenAPI v3 node written `as const` so `FromSchema` can derive its TypeScript type.
 */

/** The API group and version of every kind this operator defines. */
export const group = "serving.mlmodel.dev";
export const version = "v1alpha1";
export const apiVersion = `${group}/${version}` as const;

// The pattern the API server uses for resource.Quantity, so a typo such as "1 Gi" or "500mb"
// is rejected at admission instead of failing later inside the Deployment.
// No leading minus: a negative request, limit or size is never what anyone means, and the
// API server would otherwise refuse only the child objects, leaving the model without a status.
const quantityPattern =
  "^\\+?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$";

/**
 * A CEL rule in place of `pattern`: the API server's pattern error prints the raw regular
 * expression, this one says in words what is expected and shows the value.
 */
export function matching<const M extends string>(regex: string, expected: M) {
  const literal = regex.replaceAll("\\", "\\\\").replaceAll("'", "\\'");
  return {
    "x-kubernetes-validations": [
      {
        rule: `self.matches('${literal}')`,
        messageExpression: `'must be ${expected.replaceAll("'", "\\'")}; got "' + self + '"'`,
        reason: "FieldValueInvalid",
      },
    ],
  } as const;
}

export function quantity<const D extends string>(description: D) {
  return {
    description,
    anyOf: [{ type: "integer" }, { type: "string" }],
    "x-kubernetes-int-or-string": true,
    maxLength: 64,
    "x-kubernetes-validations": [
      {
        rule: `(type(self) == int && int(self) >= 0) || (type(self) == string && string(self).matches('${quantityPattern.replaceAll("\\", "\\\\")}'))`,
        messageExpression: `'must be a non-negative quantity such as 500m, 2, 512Mi or 1Gi; got "' + string(self) + '"'`,
        reason: "FieldValueInvalid",
      },
    ],
  } as const;
}

/** A DNS-1123 label: names of Secrets, ConfigMaps, claims and runtimes we refer to. */
export function objectName<const D extends string>(description: D) {
  return {
    type: "string",
    description,
    minLength: 1,
    maxLength: 253,
    ...matching(
      "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
      "a lowercase DNS name: a-z, 0-9, '-' and '.', starting and ending with a letter or digit",
    ),
  } as const;
}

export function port<const D extends string>(description: D) {
  return { type: "integer", description, minimum: 1, maximum: 65535 } as const;
}

/** One environment variable with a literal value (secrets belong in credentialsSecretRef). */
export const envVar = {
  type: "object",
  description: "An environment variable of the serving container.",
  required: ["name"],
  properties: {
    name: {
      type: "string",
      description: "Variable name: letters, digits and underscores, not starting with a digit.",
      ...matching("^[A-Za-z_][A-Za-z0-9_]*$", "letters, digits and '_', not starting with a digit"),
      maxLength: 253,
    },
    value: {
      type: "string",
      description:
        "Literal value. $(VAR) references to earlier variables (and to MODEL_NAME, MODEL_DIR, REST_PORT, GRPC_PORT) are expanded by Kubernetes.",
    },
  },
} as const;

export function envList<const D extends string>(description: D) {
  return {
    type: "array",
    description,
    maxItems: 64,
    items: envVar,
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
  } as const;
}

export function stringList<const D extends string>(description: D) {
  return { type: "array", description, maxItems: 64, items: { type: "string", maxLength: 4096 } } as const;
}

/** metav1.Condition, as the API conventions define it. */
export const conditions = {
  type: "array",
  description:
    "Observations of the object's state. Each condition has a type (Ready, RuntimeResolved, DependenciesReady, StorageReady, ModelDownloaded, ServingReady), a status, a CamelCase reason and a message saying what to do.",
  maxItems: 16,
  "x-kubernetes-list-type": "map",
  "x-kubernetes-list-map-keys": ["type"],
  items: {
    type: "object",
    required: ["type", "status", "reason", "message", "lastTransitionTime"],
    properties: {
      type: { type: "string", description: "Type of the condition, CamelCase.", maxLength: 316 },
      status: {
        type: "string",
        description: "True, False or Unknown.",
        enum: ["True", "False", "Unknown"],
      },
      reason: {
        type: "string",
        description: "A CamelCase word explaining the status, e.g. DownloadFailed or ImagePullBackOff.",
        maxLength: 1024,
      },
      message: {
        type: "string",
        description: "What happened and what to do, for a person.",
        maxLength: 32768,
      },
      observedGeneration: {
        type: "integer",
        format: "int64",
        minimum: 0,
        description: "The metadata.generation this condition was computed from.",
      },
      lastTransitionTime: {
        type: "string",
        format: "date-time",
        description: "When the status last changed.",
      },
    },
  },
} as const;
