/**
 * Writes docs/api.md, the API reference, from the CRDs themselves (src/api/crds.ts, the same
 * objects deploy/crds holds), so the reference cannot drift from what the API server enforces:
 *
 *   node scripts/gen-api-docs.ts          write docs/api.md
 *   node scripts/gen-api-docs.ts --check  exit 1 when docs/api.md is stale
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { allCrds } from "../src/api/crds.ts";
import type { SchemaNode } from "../src/api/schema-types.ts";

export const apiDocPath = join(resolve(import.meta.dirname, ".."), "docs", "api.md");

interface Rule {
  rule: string;
  message?: string;
  messageExpression?: string;
  fieldPath?: string;
}

interface Column {
  name: string;
  type: string;
  jsonPath: string;
  description: string;
  priority?: number;
}

/** `|` and newlines would break a table row. */
function cell(text: string): string {
  return text.replace(/\|/g, "\\|").replace(/\s*\n\s*/g, " ");
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
function anchor(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^a-z0-9 -]/g, "")
    .replace(/ /g, "-");
}

function isObject(node: SchemaNode): boolean {
  return node.type === "object" && node.properties !== undefined;
}

function typeOf(node: SchemaNode, path: string): string {
  if (node["x-kubernetes-int-or-string"]) return "integer or string";
  if (node.type === "array") {
    const items = node.items ?? {};
    return isObject(items) ? `[[]object](#${anchor(`${path}[]`)})` : `[]${typeOf(items, `${path}[]`)}`;
  }
  if (isObject(node)) return `[object](#${anchor(path)})`;
  if (node.type === "object" && node.additionalProperties)
    return `map[string]${node.additionalProperties.type ?? "any"}`;
  if (node.type === "object") return "object (free-form)";
  return `${node.type ?? "any"}${node.format ? ` (${String(node.format)})` : ""}`;
}

/** What the API server checks on the field, in words. */
function constraints(node: SchemaNode): string[] {
  const out: string[] = [];
  if (node.enum) out.push(`one of ${node.enum.map((v) => `\`${String(v)}\``).join(", ")}`);
  if (node.minimum !== undefined || node.maximum !== undefined) {
    out.push(`${node.minimum ?? "…"} to ${node.maximum ?? "…"}`);
  }
  if (node.minLength !== undefined) out.push(`at least ${String(node.minLength)} character(s)`);
  if (node.maxLength !== undefined) out.push(`at most ${String(node.maxLength)} characters`);
  if (node.maxItems !== undefined) out.push(`at most ${String(node.maxItems)} items`);
  if (node.pattern !== undefined) out.push(`matches \`${String(node.pattern)}\``);
  for (const r of (node["x-kubernetes-validations"] as Rule[] | undefined) ?? []) out.push(ruleText(r));
  return out;
}

/** A rule's message; for a message expression, its fixed text (before the offending value). */
function ruleText(r: Rule): string {
  // The leading CEL string literal, with its backslash escapes undone.
  const literal = r.messageExpression
    ? /^'((?:[^'\\]|\\.)*)'/.exec(r.messageExpression)?.[1]?.replace(/\\(.)/g, "$1")
    : undefined;
  const said = r.message ?? literal?.replace(/[;,]?\s*got\s*"?$/, "").trim();
  return said ? `${said} (\`${r.rule}\`)` : `rule \`${r.rule}\``;
}

function fieldsTable(node: SchemaNode, path: string): string {
  const required = new Set(node.required ?? []);
  const rows = Object.entries(node.properties ?? {}).map(([name, child]) => {
    const notes = constraints(child);
    const description = [child.description ?? "", notes.length ? `*Checked:* ${notes.join("; ")}.` : ""]
      .filter(Boolean)
      .join(" ");
    const def = child.default === undefined ? "" : `\`${JSON.stringify(child.default)}\``;
    return `| \`${name}\` | ${typeOf(child, `${path}.${name}`)} | ${required.has(name) ? "yes" : ""} | ${cell(def)} | ${cell(description)} |`;
  });
  return ["| Field | Type | Required | Default | Description |", "|---|---|---|---|---|", ...rows].join("\n");
}

/** A section per object in the tree, depth first, so a field's type links to its section. */
function objectSections(node: SchemaNode, path: string, out: string[]): void {
  const objectRules = (node["x-kubernetes-validations"] as Rule[] | undefined) ?? [];
  out.push(`### ${path}`, "", ...(node.description ? [node.description, ""] : []));
  if (objectRules.length) {
    out.push(
      "Rules across fields:",
      "",
      ...objectRules.map((r) => `- ${r.message ?? ruleText(r)} (\`${r.rule}\`)`),
      "",
    );
  }
  out.push(fieldsTable(node, path), "");
  for (const [name, child] of Object.entries(node.properties ?? {})) {
    if (isObject(child)) objectSections(child, `${path}.${name}`, out);
    else if (child.type === "array" && child.items && isObject(child.items)) {
      objectSections(child.items, `${path}.${name}[]`, out);
    }
  }
}

function kindSection(crd: (typeof allCrds)[number]): string[] {
  const spec = crd.spec as {
    group: string;
    scope: string;
    names: { kind: string; plural: string; shortNames?: string[]; categories?: string[] };
    versions: {
      name: string;
      schema: { openAPIV3Schema: SchemaNode };
      additionalPrinterColumns?: Column[];
      subresources?: Record<string, unknown>;
    }[];
  };
  const version = spec.versions[0]!;
  const root = version.schema.openAPIV3Schema;
  const kind = spec.names.kind;
  const out = [
    `## ${kind}`,
    "",
    root.description ?? "",
    "",
    `- API version: \`${spec.group}/${version.name}\`, ${spec.scope === "Namespaced" ? "namespaced" : "cluster-scoped"}`,
    `- Names: \`${spec.names.plural}\`${spec.names.shortNames?.length ? `, short ${spec.names.shortNames.map((n) => `\`${n}\``).join(", ")}` : ""}${spec.names.categories?.length ? `; categories ${spec.names.categories.map((n) => `\`${n}\``).join(", ")}` : ""}`,
    `- Subresources: ${Object.keys(version.subresources ?? {}).join(", ") || "none"}`,
    "",
  ];
  const rootRules = (root["x-kubernetes-validations"] as Rule[] | undefined) ?? [];
  if (rootRules.length) out.push(...rootRules.map((r) => `- Rule: ${ruleText(r)}`), "");
  if (version.additionalPrinterColumns?.length) {
    out.push(
      "`kubectl get` columns:",
      "",
      "| Column | Shows | Description |",
      "|---|---|---|",
      ...version.additionalPrinterColumns.map(
        (c) =>
          `| ${c.name}${c.priority ? " (wide)" : ""} | \`${cell(c.jsonPath)}\` | ${cell(c.description)} |`,
      ),
      "",
    );
  }
  for (const part of ["spec", "status"]) {
    const node = root.properties?.[part];
    if (node) objectSections(node, `${kind}.${part}`, out);
  }
  return out;
}

export function renderApiDoc(): string {
  const out = [
    "<!-- Generated by `node scripts/gen-api-docs.ts` from the CRD schemas (src/api). Do not edit. -->",
    "",
    "# API reference",
    "",
    "Every field of the MLModel operator's kinds, with the checks the API server applies on",
    "create and update (OpenAPI validation and CEL rules). A value that fails a check is refused",
    "with a message naming the field.",
    "",
    ...allCrds.map(
      (crd) =>
        `- [${(crd.spec as { names: { kind: string } }).names.kind}](#${anchor((crd.spec as { names: { kind: string } }).names.kind)})`,
    ),
    "",
  ];
  for (const crd of allCrds) out.push(...kindSection(crd));
  return `${out
    .join("\n")
    .replace(/\n{3,}/g, "\n\n")
    .trimEnd()}\n`;
}

export function apiDocIsCurrent(path = apiDocPath): boolean {
  try {
    return readFileSync(path, "utf8") === renderApiDoc();
  } catch {
    return false;
  }
}

if (import.meta.main) {
  if (process.argv.includes("--check")) {
    if (!apiDocIsCurrent()) {
      console.error("docs/api.md is stale; run node scripts/gen-api-docs.ts");
      process.exit(1);
    }
  } else {
    writeFileSync(apiDocPath, renderApiDoc());
    console.log("wrote docs/api.md");
  }
}
