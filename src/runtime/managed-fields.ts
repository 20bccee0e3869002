/**
 * metadata.managedFields cut out of the API server's JSON text before it is parsed.
 *
 * Why on the text: a cache drops managedFields anyway (stripManagedFields), but JSON.parse
 * has built them first, and they are the costliest part of an object to parse. Beyond their
 * size (about 45 % of a Pod or a Deployment), their fieldsV1 keys are unique per object
 * (`k:{"uid":"..."}` for an owner reference, a container's name...): V8 internalizes each such
 * key and adds a hidden-class transition for it, so with thousands of objects parsing slows
 * down as their transition trees grow. On-CPU samples of the operator with 1,000 models had
 * 10.6 % of its CPU in JSON.parse of watch events, most of it in string-table lookups and
 * transitions.
 *
 * The scan is structural: strings are skipped whole (a quote inside one is escaped, so text
 * that looks like a member inside a string is never taken for one), and only the member
 * `managedFields` of an object's own `metadata` is cut, wherever it stands among metadata's
 * members (typed objects write it last; custom resources sort their keys). Text laid out
 * otherwise than expected is returned unchanged: the caller parses it whole and drops
 * managedFields after parsing, as before.
 */

/** A JSON string starting at a quote, escapes included. */
const stringToken = /"[^"\\]*(?:\\.[^"\\]*)*"/y;
/** Inside an object or array: everything up to the next bracket, strings skipped whole. */
const toBracket = /[^"{}[\]]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"{}[\]]*)*/y;
/**
 * The rest of an array up to its `]`, when no array is nested in it (strings skipped whole):
 * managedFields is one (its fieldsV1 are objects of objects), and so are most arrays of a
 * metadata. One regular-expression match instead of a step per bracket.
 */
const flatArrayRest = /[^"[\]]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"[\]]*)*\]/y;
/** A number, true, false or null. */
const scalarToken = /[^,}\]\s]*/y;

/** A part of the text to leave out: [start, end). */
type Cut = [number, number];

/** A watch event's text (`{"type": ..., "object": {...}}`) without the object's managedFields. */
export function eventWithoutManagedFields(text: string): string {
  const object = findMember(text, skipSpace(text, 0), "object");
  if (!object || text[object.valueStart] !== "{") return text;
  const cut = managedFieldsCut(text, object.valueStart);
  return cut ? withCuts(text, [cut]) : text;
}

/** A list's text (`{..., "items": [{...}, ...]}`) without each item's managedFields. */
export function listWithoutManagedFields(text: string): string {
  const items = findMember(text, skipSpace(text, 0), "items");
  if (!items || text[items.valueStart] !== "[") return text;
  const cuts: Cut[] = [];
  let i = skipSpace(text, items.valueStart + 1);
  while (text[i] === "{") {
    const cut = managedFieldsCut(text, i);
    if (cut) cuts.push(cut);
    const end = skipValue(text, i);
    if (end < 0) return text;
    i = skipSpace(text, end);
    if (text[i] === ",") i = skipSpace(text, i + 1);
  }
  return cuts.length ? withCuts(text, cuts) : text;
}

/** Where metadata.managedFields stands in the object at `objectStart`, commas included. */
function managedFieldsCut(text: string, objectStart: number): Cut | undefined {
  const metadata = findMember(text, objectStart, "metadata");
  if (!metadata || text[metadata.valueStart] !== "{") return undefined;
  const member = findMember(text, metadata.valueStart, "managedFields");
  if (!member) return undefined;
  const valueEnd = skipValue(text, member.valueStart);
  if (valueEnd < 0) return undefined;
  // With the comma before it when it has a predecessor, else with the comma after it.
  if (member.commaBefore >= 0) return [member.commaBefore, valueEnd];
  const after = skipSpace(text, valueEnd);
  return [member.keyStart, text[after] === "," ? after + 1 : valueEnd];
}

interface Member {
  keyStart: number;
  /** Where its value starts; where the value ends is left to the caller (the scan stops here). */
  valueStart: number;
  /** The comma that separates it from the member before it, or -1 for the first member. */
  commaBefore: number;
}

/** The member `name` of the object whose `{` is at `start`, scanning its members in order. */
function findMember(text: string, start: number, name: string): Member | undefined {
  if (text[start] !== "{") return undefined;
  let i = skipSpace(text, start + 1);
  let commaBefore = -1;
  while (text[i] === '"') {
    const keyStart = i;
    const keyEnd = skipString(text, i);
    if (keyEnd < 0) return undefined;
    i = skipSpace(text, keyEnd);
    if (text[i] !== ":") return undefined;
    const valueStart = skipSpace(text, i + 1);
    // Keys are compared as written: the API server writes member names without escapes.
    if (keyEnd - keyStart === name.length + 2 && text.startsWith(name, keyStart + 1))
      return { keyStart, valueStart, commaBefore };
    const valueEnd = skipValue(text, valueStart);
    if (valueEnd < 0) return undefined;
    i = skipSpace(text, valueEnd);
    if (text[i] !== ",") return undefined;
    commaBefore = i;
    i = skipSpace(text, i + 1);
  }
  return undefined;
}

/** The end of the JSON value starting at `i`, or -1 when the text ends first. */
function skipValue(text: string, i: number): number {
  const c = text[i];
  if (c === '"') return skipString(text, i);
  if (c !== "{" && c !== "[") {
    scalarToken.lastIndex = i;
    scalarToken.test(text);
    return scalarToken.lastIndex > i ? scalarToken.lastIndex : -1;
  }
  if (c === "[") {
    flatArrayRest.lastIndex = i + 1;
    if (flatArrayRest.test(text)) return flatArrayRest.lastIndex;
  }
  // Bracket by bracket: each match jumps over everything up to the next one.
  let depth = 0;
  while (i < text.length) {
    const ch = text[i];
    if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") {
      if (--depth === 0) return i + 1;
    } else return -1; // an unterminated string
    toBracket.lastIndex = i + 1;
    toBracket.test(text);
    i = toBracket.lastIndex;
  }
  return -1;
}

/** The end (after the closing quote) of the JSON string whose quote is at `i`, or -1 if it is unterminated. */
export function skipString(text: string, i: number): number {
  stringToken.lastIndex = i;
  return stringToken.test(text) ? stringToken.lastIndex : -1;
}

function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

function withCuts(text: string, cuts: readonly Cut[]): string {
  let out = "";
  let from = 0;
  for (const [start, end] of cuts) {
    out += text.slice(from, start);
    from = end;
  }
  return out + text.slice(from);
}
