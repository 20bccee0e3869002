/**
 * The pure parts of FakeClient (fake-client.ts): label and field selectors, JSON merge patch
 * (RFC 7386), JSON patch (RFC 6902), and the leaf field paths server-side apply's ownership is
 * kept by. Errors are the ApiErrors the API server answers with (400 BadRequest, 422 Invalid).
 */
import { ApiError } from "./errors.ts";
import type { KubeObject } from "./types.ts";

type Json = unknown;
type JsonMap = Record<string, unknown>;

export function isMap(value: Json): value is JsonMap {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function badRequest(message: string): ApiError {
  return new ApiError(400, `400 BadRequest ${message}`, {
    reason: "BadRequest",
    status: { kind: "Status", status: "Failure", reason: "BadRequest", code: 400, message },
  });
}

export function invalid(message: string): ApiError {
  return new ApiError(422, `422 Invalid ${message}`, {
    reason: "Invalid",
    status: { kind: "Status", status: "Failure", reason: "Invalid", code: 422, message },
  });
}

/** One requirement of a label selector. */
interface Requirement {
  key: string;
  op: "=" | "!=" | "in" | "notin" | "exists" | "!exists";
  values: string[];
}

/**
 * Parses a label selector as the API server does: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
 * `a notin (x)`, `a`, `!a`, joined by commas. Malformed: 400 BadRequest naming the term.
 */
export function parseLabelSelector(selector: string): Requirement[] {
  const out: Requirement[] = [];
  for (const raw of splitTerms(selector)) {
    const term = raw.trim();
    if (!term) continue;
    const set = /^([^\s!=(),]+)\s+(in|notin)\s+\(([^()]*)\)$/.exec(term);
    if (set) {
      const values = set[3]!.split(",").map((v) => v.trim());
      out.push({ key: set[1]!, op: set[2] as "in" | "notin", values });
      continue;
    }
    const eq = /^([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)$/.exec(term);
    if (eq) {
      out.push({ key: eq[1]!, op: eq[2] === "!=" ? "!=" : "=", values: [eq[3]!] });
      continue;
    }
    const exists = /^(!?)([^\s!=(),]+)$/.exec(term);
    if (exists) {
      out.push({ key: exists[2]!, op: exists[1] ? "!exists" : "exists", values: [] });
      continue;
    }
    throw badRequest(
      `unable to parse requirement "${term}" of labelSelector "${selector}": expected key=value, key!=value, key in (a,b), key notin (a), key or !key`,
    );
  }
  return out;
}

function splitTerms(selector: string): string[] {
  const terms: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < selector.length; i++) {
    const c = selector[i];
    if (c === "(") depth++;
    else if (c === ")") depth--;
    else if (c === "," && depth === 0) {
      terms.push(selector.slice(start, i));
      start = i + 1;
    }
  }
  terms.push(selector.slice(start));
  return terms;
}

export function labelsMatch(
  requirements: Requirement[],
  labels: Record<string, string> | undefined,
): boolean {
  return requirements.every(({ key, op, values }) => {
    const value = labels?.[key];
    switch (op) {
      case "=":
        return value === values[0];
      case "!=":
        return value !== values[0];
      case "in":
        return value !== undefined && values.includes(value);
      case "notin":
        return value === undefined || !values.includes(value);
      case "exists":
        return value !== undefined;
      default:
        return value === undefined;
    }
  });
}

/**
 * A field selector (`metadata.name=x,spec.nodeName!=y`) as a predicate. Any dotted path of
 * the object is accepted (the API server allows a few per kind); values compare as strings.
 */
export function fieldSelectorMatcher(selector: string): (obj: KubeObject) => boolean {
  const terms = selector
    .split(",")
    .map((t) => t.trim())
    .filter(Boolean)
    .map((term) => {
      const m = /^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$/.exec(term);
      if (!m)
        throw badRequest(
          `invalid field selector term "${term}" of "${selector}": expected path=value or path!=value`,
        );
      return { path: m[1]!.split("."), negated: m[2] === "!=", value: m[3]! };
    });
  return (obj) =>
    terms.every(({ path, negated, value }) => {
      const found = valueAt(obj, path);
      const text = found === undefined || found === null ? "" : String(found);
      return (text === value) !== negated;
    });
}

/** RFC 7386: maps merge, null removes, anything else replaces. */
export function mergePatch(target: Json, patch: Json): Json {
  if (!isMap(patch)) return structuredClone(patch);
  const out: JsonMap = isMap(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = mergePatch(out[key], value);
  }
  return out;
}

interface JsonPatchOp {
  op: string;
  path: string;
  value?: unknown;
  from?: string;
}

/** RFC 6902 on a copy of `doc`: add, remove, replace, move, copy, test. A failed op is a 422. */
export function jsonPatch(doc: Json, ops: unknown): Json {
  if (!Array.isArray(ops)) throw badRequest("a JSON patch must be an array of operations");
  let out = structuredClone(doc);
  for (const [i, raw] of ops.entries()) {
    const op = raw as JsonPatchOp;
    const at = `JSON patch operation ${i} (${op.op} ${op.path})`;
    switch (op.op) {
      case "add":
        out = putPointer(out, pointer(op.path), structuredClone(op.value), "add", at);
        break;
      case "replace":
        out = putPointer(out, pointer(op.path), structuredClone(op.value), "replace", at);
        break;
      case "remove":
        out = removePointer(out, pointer(op.path), at);
        break;
      case "move": {
        const value = getPointer(out, pointer(op.from ?? ""), at);
        out = removePointer(out, pointer(op.from ?? ""), at);
        out = putPointer(out, pointer(op.path), value, "add", at);
        break;
      }
      case "copy":
        out = putPointer(
          out,
          pointer(op.path),
          structuredClone(getPointer(out, pointer(op.from ?? ""), at)),
          "add",
          at,
        );
        break;
      case "test":
        if (!sameJson(getPointer(out, pointer(op.path), at), op.value))
          throw invalid(`${at}: the value is not ${JSON.stringify(op.value)}`);
        break;
      default:
        throw badRequest(`${at}: op must be add, remove, replace, move, copy or test`);
    }
  }
  return out;
}

function pointer(path: string): string[] {
  if (path === "") return [];
  if (!path.startsWith("/")) throw badRequest(`JSON pointer "${path}" must start with "/"`);
  return path
    .slice(1)
    .split("/")
    .map((p) => p.replaceAll("~1", "/").replaceAll("~0", "~"));
}

function getPointer(doc: Json, path: string[], at: string): Json {
  let cur = doc;
  for (const part of path) {
    if (Array.isArray(cur)) cur = cur[Number(part)];
    else if (isMap(cur)) cur = cur[part];
    else cur = undefined;
    if (cur === undefined) throw invalid(`${at}: no value at /${path.join("/")}`);
  }
  return cur;
}

function putPointer(doc: Json, path: string[], value: Json, mode: "add" | "replace", at: string): Json {
  if (path.length === 0) return value;
  const parent = getPointer(doc, path.slice(0, -1), at);
  const last = path[path.length - 1]!;
  if (Array.isArray(parent)) {
    const index = last === "-" ? parent.length : Number(last);
    if (!Number.isInteger(index) || index < 0 || index > parent.length - (mode === "replace" ? 1 : 0))
      throw invalid(`${at}: index ${last} is out of range`);
    parent.splice(index, mode === "replace" ? 1 : 0, value);
  } else if (isMap(parent)) {
    if (mode === "replace" && !(last in parent)) throw invalid(`${at}: no value at /${path.join("/")}`);
    parent[last] = value;
  } else {
    throw invalid(`${at}: the parent of /${path.join("/")} is not an object or array`);
  }
  return doc;
}

function removePointer(doc: Json, path: string[], at: string): Json {
  const parent = getPointer(doc, path.slice(0, -1), at);
  const last = path[path.length - 1]!;
  if (Array.isArray(parent) && Number(last) < parent.length) parent.splice(Number(last), 1);
  else if (isMap(parent) && last in parent) delete parent[last];
  else throw invalid(`${at}: no value at /${path.join("/")}`);
  return doc;
}

/** Deep equality of JSON values (key order ignored). */
export function sameJson(a: Json, b: Json): boolean {
  if (a === b) return true;
  if (Array.isArray(a))
    return Array.isArray(b) && a.length === b.length && a.every((v, i) => sameJson(v, b[i]));
  if (isMap(a) && isMap(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && sameJson(a[k], b[k]));
  }
  return false;
}

/**
 * The leaf paths of a value, each as a JSON array string: maps are walked into, everything
 * else (scalars, lists, empty maps) is a leaf. Lists are atomic, as a list without a schema's
 * merge keys is to server-side apply.
 */
export function leafPaths(value: Json, prefix: string[] = [], out = new Set<string>()): Set<string> {
  if (isMap(value) && Object.keys(value).length > 0) {
    for (const [key, child] of Object.entries(value)) leafPaths(child, [...prefix, key], out);
  } else if (prefix.length > 0) {
    out.add(JSON.stringify(prefix));
  }
  return out;
}

export function valueAt(value: Json, path: readonly string[]): Json {
  let cur = value;
  for (const part of path) {
    if (!isMap(cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

export function setAt(target: JsonMap, path: readonly string[], value: Json): void {
  let cur = target;
  for (const part of path.slice(0, -1)) {
    if (!isMap(cur[part])) cur[part] = {};
    cur = cur[part] as JsonMap;
  }
  cur[path[path.length - 1]!] = structuredClone(value);
}

/** Removes the value at `path` and the maps it leaves empty. */
export function removeAt(target: JsonMap, path: readonly string[]): void {
  const parents: JsonMap[] = [target];
  let cur: Json = target;
  for (const part of path.slice(0, -1)) {
    cur = (cur as JsonMap)[part];
    if (!isMap(cur)) return;
    parents.push(cur);
  }
  delete (cur as JsonMap)[path[path.length - 1]!];
  for (let i = parents.length - 1; i > 0; i--) {
    if (Object.keys(parents[i]!).length > 0) break;
    delete parents[i - 1]![path[i - 1]!];
  }
}
