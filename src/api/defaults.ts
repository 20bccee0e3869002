/**
 * Applies a schema's `default`s to a value the way the API server does (structural
 * defaulting): a missing property with a default gets it, recursively, and defaults inside an
 * object only apply when that object exists. The API server has already done this for every
 * object we read; the operator applies it again so objects created before a default was added,
 * and unit-test inputs, behave the same. One source of defaults: the schema.
 */
import type { FromSchema, SchemaNode } from "./schema-types.ts";

export function applySchemaDefaults<const S extends SchemaNode>(
  schema: S,
  value: FromSchema<S>,
): FromSchema<S, "defaulted"> {
  return defaulted(schema, value) as FromSchema<S, "defaulted">;
}

function defaulted(schema: SchemaNode, value: unknown): unknown {
  if (Array.isArray(value)) {
    const items = schema.items;
    return items ? value.map((v) => defaulted(items, v)) : value;
  }
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  for (const [name, child] of Object.entries(schema.properties ?? {})) {
    if (out[name] === undefined && child.default !== undefined) out[name] = structuredClone(child.default);
    if (out[name] !== undefined) out[name] = defaulted(child, out[name]);
  }
  const extra = schema.additionalProperties;
  if (extra) for (const [name, v] of Object.entries(out)) out[name] = defaulted(extra, v);
  return out;
}
