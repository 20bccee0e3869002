/**
 * A type-level mapper from Kubernetes structural OpenAPI v3 schemas (written `as const`) to
 * TypeScript types, so the CRD schema is the single source of truth and the types cannot drift.
 *
 * We hand-write this instead of using json-schema-to-ts because Kubernetes schemas are a
 * dialect: `properties` and `additionalProperties` are mutually exclusive (json-schema-to-ts
 * would add an index signature to every object), and the `x-kubernetes-*` extensions
 * (int-or-string, preserve-unknown-fields) change the type.
 */

/** The subset of a structural schema node the mapper understands. */
export interface SchemaNode {
  readonly type?: "object" | "array" | "string" | "integer" | "number" | "boolean";
  readonly description?: string;
  readonly properties?: { readonly [name: string]: SchemaNode };
  readonly required?: readonly string[];
  readonly items?: SchemaNode;
  readonly additionalProperties?: SchemaNode;
  readonly enum?: readonly unknown[];
  readonly default?: unknown;
  readonly "x-kubernetes-int-or-string"?: true;
  readonly "x-kubernetes-preserve-unknown-fields"?: true;
  readonly [keyword: string]: unknown;
}

type Simplify<T> = { [K in keyof T]: T[K] } & {};

/**
 * "input": what a user may write (only `required` properties are required).
 * "defaulted": what the API server stores after defaulting (properties with a `default` are
 * present too), the type the operator works with.
 */
export type SchemaMode = "input" | "defaulted";

type RequiredKeys<S extends SchemaNode, P, M extends SchemaMode> =
  | (S extends { required: infer R extends readonly string[] } ? R[number] : never)
  | (M extends "defaulted"
      ? { [K in keyof P]: P[K] extends { default: unknown } ? K : never }[keyof P]
      : never);

type ObjectOf<S extends SchemaNode, M extends SchemaMode> = S extends {
  properties: infer P extends { readonly [k: string]: SchemaNode };
}
  ? Simplify<
      { -readonly [K in keyof P as K extends RequiredKeys<S, P, M> ? K : never]: FromSchema<P[K], M> } & {
        -readonly [K in keyof P as K extends RequiredKeys<S, P, M> ? never : K]?: FromSchema<P[K], M>;
      }
    >
  : S extends { additionalProperties: infer A extends SchemaNode }
    ? Record<string, FromSchema<A, M>>
    : Record<string, unknown>;

/** The TypeScript type of values a schema node accepts (or holds after defaulting). */
export type FromSchema<S extends SchemaNode, M extends SchemaMode = "input"> = S extends {
  "x-kubernetes-int-or-string": true;
}
  ? number | string
  : S extends { enum: readonly (infer E)[] }
    ? E
    : S extends { type: "string" }
      ? string
      : S extends { type: "integer" | "number" }
        ? number
        : S extends { type: "boolean" }
          ? boolean
          : S extends { type: "array"; items: infer I extends SchemaNode }
            ? FromSchema<I, M>[]
            : S extends { type: "object" }
              ? ObjectOf<S, M>
              : unknown;
