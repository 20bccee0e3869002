// http(s):// URLs: one file per URL (HTTP has no listing), bearer or custom-header auth.
import { credentialNames } from "../contract.ts";
import type { Credentials } from "../credentials.ts";
import { DownloadError } from "../errors.ts";
import { safeRelativePath } from "../paths.ts";
import { HttpClient } from "./http-client.ts";
import type { OpenedBody, RemoteFile, Source, SourceLimits } from "./source.ts";

const names = credentialNames.http;

/**
 * Parses `Name: value` lines into headers. A bad line is named by its number and what is wrong
 * with it, never shown: its value is a credential, and the error reaches the MLModel's status.
 */
export function parseHeaderLines(text: string): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (line === "") continue;
    const colon = line.indexOf(":");
    const name = colon > 0 ? line.slice(0, colon).trim() : "";
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
      const wrong =
        colon < 0
          ? 'it has no "Name:" before its value'
          : colon === 0
            ? 'it starts with ":" (no header name)'
            : 'its name before the first ":" holds a character a header name cannot (a space, a quote, a bracket)';
      throw new DownloadError("InvalidArgument", `${names.headers} line ${i + 1} is not a header: ${wrong}`, {
        hint: `expected one "Name: value" per line, e.g. "X-Api-Key: <key>" (the line is not shown: it may hold a secret)`,
      });
    }
    headers[name.toLowerCase()] = line.slice(colon + 1).trim();
  }
  return headers;
}

export class HttpSource implements Source {
  private readonly url: URL;
  private readonly client: HttpClient;
  constructor(url: URL, creds: Credentials, limits: SourceLimits) {
    this.url = url;
    const headers = parseHeaderLines(creds.get(names.headers) ?? "");
    const token = creds.get(names.bearerToken);
    if (token) headers.authorization = `Bearer ${token}`;
    const ca = creds.caCertificates();
    this.client = new HttpClient({
      headers,
      credentialOrigin: url.origin,
      requestTimeoutMs: limits.requestTimeoutMs,
      authHint: creds.secretHint(`${names.bearerToken} or ${names.headers}`),
      ...(ca ? { ca } : {}),
    });
  }

  async list(): Promise<RemoteFile[]> {
    const segments = this.url.pathname.split("/").filter(Boolean);
    const name = decodeURIComponent(segments.at(-1) ?? "") || "model";
    return [{ path: safeRelativePath(name, "object"), ref: this.url.href }];
  }

  open(
    file: RemoteFile,
    offset: number,
    version: string | undefined,
    signal: AbortSignal,
  ): Promise<OpenedBody> {
    return this.client.getRange(file.ref, offset, version, signal);
  }

  close(): Promise<void> {
    return this.client.close();
  }
}
