// Model URIs may carry credentials: a password before the host, the signature of a pre-signed
// S3, GCS or Azure (SAS) URL, a `?token=`. Anything that SHOWS a URI (status, Events, condition
// messages, logs, the termination message, CLI views) shows it through these functions; only
// the download itself uses the exact URI. docs/downloader.md ("Credentials in the URI") says
// where the exact URI lives instead.

/** What stands where a hidden part was. Plain and URL-safe, so a redacted URI still reads as one. */
export const redactedMarker = "REDACTED";

// Token shapes that are credentials wherever they appear (a path segment, a parameter name, an
// error text): Hugging Face access tokens, JSON Web Tokens, Google API keys, GitHub tokens,
// `sk-` API keys (with a digit, so a word such as sk-learn stays) and AWS access key ids.
const tokenShapes = [
  /\bhf_[A-Za-z0-9]{20,}/g,
  /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*/g,
  /\bAIza[0-9A-Za-z_-]{35}\b/g,
  /\bgh[pousr]_[A-Za-z0-9]{30,}/g,
  /\bgithub_pat_[A-Za-z0-9_]{22,}/g,
  /\bsk-(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{20,}/g,
  /\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b/g,
];

function withoutTokens(text: string): string {
  return tokenShapes.reduce((t, shape) => t.replace(shape, redactedMarker), text);
}

/**
 * Whether a parameter name reads as a name (`X-Amz-Signature`, `response-content-type`, `v2`)
 * rather than a secret put where the name goes (`?<JWT>=1`): short, few digits, no token shape,
 * and a long one made of words joined by separators.
 */
function looksLikeName(name: string): boolean {
  if (name.length > 64 || (name.match(/\d/g)?.length ?? 0) > 4) return false;
  if (name.length >= 24 && !/[-_.]/.test(name)) return false;
  return /^[A-Za-z0-9_.[\]%-]+$/.test(name) && withoutTokens(name) === name;
}

/** One `name=value` part: the name stays when it reads as one, the value always goes. */
function redactParameter(part: string, equals: RegExp): string {
  if (part === "") return part;
  const eq = part.search(equals);
  // A bare part (`?AKIA...`) may itself be the secret.
  if (eq < 0) return redactedMarker;
  const name = part.slice(0, eq);
  const sign = equals.exec(part.slice(eq))?.[0] ?? "=";
  return `${looksLikeName(name) ? name : redactedMarker}${sign}${redactedMarker}`;
}

/** `a=1&b&c=3` -> `a=REDACTED&REDACTED&c=REDACTED`: names stay, every value goes. */
function redactParameters(params: string): string {
  return params
    .split("&")
    .map((part) => redactParameter(part, /=/))
    .join("&");
}

/** A query percent-encoded into a path (`m.bin%3Ftoken%3Dabc%26v%3D1`), `%26` and `&` both separate. */
function redactEncodedParameters(params: string): string {
  return params
    .split(/(%26|&)/i)
    .map((part, i) => (i % 2 === 1 ? part : redactParameter(part, /%3D|=/i)))
    .join("");
}

// Hosts whose shared links carry their access key as a path segment (`/s/<key>/name`).
const keyInPathHosts = /(^|\.)dropbox(usercontent)?\.com$/i;
const keyInPathSegment = /^(\/(?:s|sh|scl\/fi|scl\/fo))\/[^/]+/;

/**
 * The path of a URI as it may be shown: matrix parameters (`;token=abc`) keep their names, a
 * query percent-encoded into the path keeps its names, a shared-link key goes.
 */
function redactPath(path: string, host: string): string {
  const encodedQuery = path.search(/%3F/i);
  const plain = encodedQuery < 0 ? path : path.slice(0, encodedQuery);
  const keyed = keyInPathHosts.test(host) ? plain.replace(keyInPathSegment, `$1/${redactedMarker}`) : plain;
  const matrix = keyed
    .split("/")
    .map((segment) => {
      const [first, ...params] = segment.split(";");
      return [first, ...params.map((p) => redactParameter(p, /=/))].join(";");
    })
    .join("/");
  if (encodedQuery < 0) return matrix;
  const mark = path.slice(encodedQuery, encodedQuery + 3);
  return `${matrix}${mark}${redactEncodedParameters(path.slice(encodedQuery + 3))}`;
}

/**
 * Userinfo (everything up to the last "@" of the authority) becomes the marker; the path is
 * shown as {@link redactPath} says.
 */
function redactHead(head: string): string {
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(head)?.[0];
  // Without "scheme://" (`user:pass@host/m.tgz`), the first segment plays the authority.
  const start = scheme?.length ?? 0;
  const slash = head.indexOf("/", start);
  const end = slash < 0 ? head.length : slash;
  const at = head.lastIndexOf("@", end - 1);
  const authority =
    at < start ? head.slice(0, end) : `${head.slice(0, start)}${redactedMarker}${head.slice(at, end)}`;
  const host = authority.slice(Math.max(start, authority.lastIndexOf("@") + 1)).replace(/:\d*$/, "");
  return authority + redactPath(head.slice(end), host);
}

/**
 * A model URI as it may be shown anywhere: scheme, host, path and the NAMES of query and
 * fragment parameters are kept; userinfo, every query and fragment value, and token-shaped
 * path parts (hf_..., JWTs) become REDACTED. So
 * `https://u:p@host/m.tgz?X-Amz-Signature=abc#k=v` -> `https://REDACTED@host/m.tgz?X-Amz-Signature=REDACTED#k=REDACTED`.
 * Any string is accepted (a URI that is not a URL is still cleaned); never throws; idempotent.
 */
export function redactUri(uri: string): string {
  const hash = uri.indexOf("#");
  const beforeHash = hash < 0 ? uri : uri.slice(0, hash);
  const question = beforeHash.indexOf("?");
  const head = question < 0 ? beforeHash : beforeHash.slice(0, question);
  const query = question < 0 ? undefined : beforeHash.slice(question + 1);
  const fragment = hash < 0 ? undefined : uri.slice(hash + 1);
  return (
    withoutTokens(redactHead(head)) +
    (query === undefined ? "" : `?${redactParameters(query)}`) +
    (fragment === undefined ? "" : `#${redactParameters(fragment)}`)
  );
}

/**
 * A user name or password before the host (`scheme://user:pass@host/...`). Never sent by the
 * downloader, so refused; the MLModel CRD refuses the same (src/api/mlmodel.ts, in CEL).
 */
export const userinfoPattern = /^([^:/?#]+:\/\/)?[^/?#]*@/;

/** True when showing the URI would hide something: it cannot travel in plain sight (Job args). */
export function uriHasSecrets(uri: string): boolean {
  return redactUri(uri) !== uri;
}

// Parameters that carry a credential wherever they show up in text, even without a scheme
// (`GET /bucket/key?X-Amz-Signature=...` in an error): pre-signed S3 and GCS URLs, Azure SAS,
// OAuth and custom tokens. Matched case-insensitively.
const credentialParameters = [
  "x-amz-signature",
  "x-amz-credential",
  "x-amz-security-token",
  "x-goog-signature",
  "x-goog-credential",
  "sig",
  "signature",
  "token",
  "access_token",
  "id_token",
  "refresh_token",
  "api_key",
  "apikey",
  "password",
  "secret",
  "client_secret",
];
// The value stops before punctuation that ends the sentence around it ("(token=abc).").
const credentialParameterPattern = new RegExp(
  `([?&;#\\s"'(]|^)(${credentialParameters.join("|")})=[^&#\\s"'<>\\\\]*?(?=[.,;:!)\\]}]*(?:[&#\\s"'<>\\\\]|$))`,
  "gi",
);
// The same, percent-encoded into a path or another parameter (`m.bin%3Ftoken%3Dabc%26v%3D1`).
const encodedCredentialParameterPattern = new RegExp(
  `(%3F|%26)(${credentialParameters.join("|")})%3D(?:(?!%26)[^&#\\s"'<>\\\\])*`,
  "gi",
);
// Request headers that carry a credential, as an error or a log may print them: `Name: value`,
// `"name":"value"` (JSON) or `name: 'value'` (util.inspect). An auth scheme before the value stays.
const credentialHeaders = [
  "authorization",
  "proxy-authorization",
  "x-api-key",
  "x-goog-api-key",
  "api-key",
  "x-auth-token",
  "x-goog-signature",
  "x-goog-credential",
  "x-amz-signature",
  "x-amz-credential",
  "x-amz-security-token",
];
const authSchemes = ["Bearer", "Basic", "Digest", "Token", "Negotiate", "AWS4-HMAC-SHA256", "SharedKey"];
const credentialHeaderPattern = new RegExp(
  `(^|[^A-Za-z0-9-])(${credentialHeaders.join("|")})(["']?\\s*:\\s*["']?)((?:${authSchemes.join("|")})\\s+)?[^\\s"'<>\\\\,;]+`,
  "gi",
);
// Neither pattern takes a quote or a backslash: redacting a JSON log line keeps it valid JSON.
const uriInText = /[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`\\]+/gi;
// Punctuation that ends a sentence more often than a URI ("see https://host/m.")
const trailingPunctuation = /[.,;:!?)\]}]+$/;

/**
 * Free text (an error message, a termination message, a log line) with every URI in it
 * redacted as {@link redactUri} does, plus credential parameters (plain or percent-encoded),
 * credential headers and token shapes found outside a URI. Idempotent.
 */
export function redactText(text: string): string {
  const uris = text.replace(uriInText, (found) => {
    const tail = trailingPunctuation.exec(found)?.[0] ?? "";
    return redactUri(found.slice(0, found.length - tail.length)) + tail;
  });
  return withoutTokens(
    uris
      .replace(credentialParameterPattern, `$1$2=${redactedMarker}`)
      .replace(encodedCredentialParameterPattern, `$1$2%3D${redactedMarker}`)
      .replace(credentialHeaderPattern, `$1$2$3$4${redactedMarker}`),
  );
}

// Secret values shorter than this are not searched for in free text on their own (a SAS's
// `sp=r` would turn every "r" into the marker); the URI-shaped and parameter-shaped passes
// of redactText still catch them in context.
const minSecretLength = 8;

function decoded(value: string): string {
  try {
    return decodeURIComponent(value.replace(/\+/g, " "));
  } catch {
    return value;
  }
}

// What separates the parts of a URI that redaction hides or keeps whole.
const uriPartSeparators = /%3F|%26|%3D|[/?#&=;@:]/i;

/**
 * The hidden values of one exact URI: its userinfo, its parameter values, and every other part
 * the shown form replaced (a key in the path, a matrix or encoded parameter), as written and
 * percent-decoded (an SDK or server may echo either).
 */
function secretValues(uri: string): string[] {
  const values = new Set<string>();
  const add = (v: string) => {
    for (const form of [v, decoded(v)]) if (form.length >= minSecretLength) values.add(form);
  };
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(uri)?.[0].length ?? 0;
  const authorityEnd = uri.slice(scheme).search(/[/?#]/);
  const authority = uri.slice(scheme, authorityEnd < 0 ? undefined : scheme + authorityEnd);
  const at = authority.lastIndexOf("@");
  if (at >= 0) {
    add(authority.slice(0, at));
    for (const part of authority.slice(0, at).split(":")) add(part);
  }
  const params = uri.split(/[?#]/).slice(1).join("&");
  for (const part of params.split("&")) {
    const eq = part.indexOf("=");
    add(eq < 0 ? part : part.slice(eq + 1));
  }
  const shown = new Set(redactUri(uri).split(uriPartSeparators));
  for (const part of uri.split(uriPartSeparators)) if (!shown.has(part)) add(part);
  return [...values].sort((a, b) => b.length - a.length);
}

/**
 * A cleaner for everything the downloader prints about one exact URI: the URI itself (as
 * given or as a URL parser normalises it) becomes its redacted form, each of its secret
 * values becomes the marker wherever it appears, then {@link redactText} runs over the rest.
 */
export function uriScrubber(exact: string): (text: string) => string {
  const shown = redactUri(exact);
  const forms = new Set([exact]);
  try {
    forms.add(new URL(exact).href);
  } catch {
    // Not a URL: the exact string is the only form.
  }
  const values = secretValues(exact);
  return (text) => {
    let out = text;
    for (const form of forms) out = out.split(form).join(shown);
    for (const value of values) out = out.split(value).join(redactedMarker);
    return redactText(out);
  };
}
