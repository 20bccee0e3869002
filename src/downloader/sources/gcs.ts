// gs:// over the Cloud Storage JSON API with plain HTTP (the official SDK pulls in a large
// tree for the three calls we need). Auth: a service-account JSON key exchanged for an OAuth
// token (a signed JWT, RFC 7523, as Google's libraries do), or anonymous for public buckets.
// Each object is read at the generation seen in the listing, so a resume never mixes versions.
import { createSign } from "node:crypto";
import { readFileSync } from "node:fs";
import { credentialNames } from "../contract.ts";
import type { Credentials } from "../credentials.ts";
import { DownloadError } from "../errors.ts";
import { safeRelativePath } from "../paths.ts";
import { HttpClient } from "./http-client.ts";
import {
  type OpenedBody,
  PageBound,
  type RemoteFile,
  relativePath,
  type Source,
  type SourceLimits,
} from "./source.ts";

const names = credentialNames.gs;
const readOnlyScope = "https://www.googleapis.com/auth/devstorage.read_only";

interface ServiceAccountKey {
  client_email: string;
  private_key: string;
  private_key_id?: string;
  token_uri?: string;
}

interface GcsObject {
  name: string;
  size: string;
  generation: string;
}

function base64url(data: string | Buffer): string {
  return Buffer.from(data).toString("base64url");
}

/** A JWT assertion signed with the service account's key (RS256). */
export function signedAssertion(key: ServiceAccountKey, tokenUri: string, nowSeconds: number): string {
  const header = { alg: "RS256", typ: "JWT", ...(key.private_key_id ? { kid: key.private_key_id } : {}) };
  const claims = {
    iss: key.client_email,
    scope: readOnlyScope,
    aud: tokenUri,
    iat: nowSeconds,
    exp: nowSeconds + 3600,
  };
  const unsigned = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
  const signature = createSign("RSA-SHA256").update(unsigned).sign(key.private_key);
  return `${unsigned}.${base64url(signature)}`;
}

function loadKey(creds: Credentials): { key: ServiceAccountKey; path: string } | undefined {
  const path = creds.env[names.applicationCredentials] || creds.filePath(names.serviceAccountFile);
  if (!path) return undefined;
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new DownloadError("InvalidArgument", `service-account key ${path}: ${(err as Error).message}`, {
      hint: creds.secretHint(names.serviceAccountFile),
    });
  }
  let key: Partial<ServiceAccountKey>;
  try {
    key = JSON.parse(text) as Partial<ServiceAccountKey>;
  } catch {
    // JSON.parse quotes the start of what it could not read: that may be the key itself.
    throw new DownloadError("InvalidArgument", `service-account key ${path} is not JSON`, {
      hint: `${creds.secretHint(names.serviceAccountFile)}: it must hold the JSON key file of a service account (type service_account), as downloaded`,
    });
  }
  if (typeof key.client_email !== "string" || typeof key.private_key !== "string") {
    throw new DownloadError(
      "InvalidArgument",
      `service-account key ${path} lacks client_email or private_key`,
      {
        hint: "use a JSON key created for a service account (type service_account)",
      },
    );
  }
  return { key: key as ServiceAccountKey, path };
}

/** Caches an access token until a minute before it expires. */
class TokenSource {
  private token: { value: string; expiresAt: number } | undefined;
  private readonly key: ServiceAccountKey;
  private readonly client: HttpClient;
  constructor(key: ServiceAccountKey, client: HttpClient) {
    this.key = key;
    this.client = client;
  }
  async headers(): Promise<Record<string, string>> {
    const now = Date.now();
    if (!this.token || this.token.expiresAt - 60_000 < now) {
      const tokenUri = this.key.token_uri ?? "https://oauth2.googleapis.com/token";
      const res = await this.client.postForm<{ access_token: string; expires_in?: number }>(tokenUri, {
        grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer",
        assertion: signedAssertion(this.key, tokenUri, Math.floor(now / 1000)),
      });
      this.token = { value: res.access_token, expiresAt: now + (res.expires_in ?? 3600) * 1000 };
    }
    return { authorization: `Bearer ${this.token.value}` };
  }
}

function apiBase(creds: Credentials): string {
  const emulator = creds.get(names.emulatorHost);
  if (!emulator) return "https://storage.googleapis.com";
  return (/^https?:\/\//.test(emulator) ? emulator : `http://${emulator}`).replace(/\/$/, "");
}

export class GcsSource implements Source {
  private readonly client: HttpClient;
  private readonly tokenClient: HttpClient;
  private readonly base: string;
  private readonly bucket: string;
  private readonly key: string;
  private readonly maxListPages: number;
  constructor(loc: { bucket: string; key: string }, creds: Credentials, limits: SourceLimits) {
    this.maxListPages = limits.maxListPages;
    this.bucket = loc.bucket;
    this.key = loc.key;
    this.base = apiBase(creds);
    const ca = creds.caCertificates();
    const sa = loadKey(creds);
    const common = {
      credentialOrigin: this.base,
      requestTimeoutMs: limits.requestTimeoutMs,
      authHint: creds.secretHint(`${names.serviceAccountFile} (the service account's access)`),
      ...(ca ? { ca } : {}),
    };
    this.tokenClient = new HttpClient(common);
    const tokens = sa ? new TokenSource(sa.key, this.tokenClient) : undefined;
    this.client = new HttpClient({
      ...common,
      ...(tokens ? { dynamicHeaders: () => tokens.headers() } : {}),
    });
  }

  private objectUrl(name: string): string {
    return `${this.base}/storage/v1/b/${encodeURIComponent(this.bucket)}/o/${encodeURIComponent(name)}`;
  }

  async list(signal: AbortSignal): Promise<RemoteFile[]> {
    if (this.key !== "" && !this.key.endsWith("/")) {
      const single = await this.getObject(this.key, signal);
      if (single) return [this.toFile(single, this.key)];
    }
    const prefix = this.key === "" || this.key.endsWith("/") ? this.key : `${this.key}/`;
    const files: RemoteFile[] = [];
    const pages = new PageBound(`gs://${this.bucket}/${prefix}`, this.maxListPages, names.emulatorHost);
    let pageToken: string | undefined;
    do {
      const q = new URLSearchParams({ prefix, fields: "items(name,size,generation),nextPageToken" });
      if (pageToken) q.set("pageToken", pageToken);
      const url = `${this.base}/storage/v1/b/${encodeURIComponent(this.bucket)}/o?${q}`;
      const { data } = await this.client.getJson<{ items?: GcsObject[]; nextPageToken?: string }>(
        url,
        signal,
      );
      for (const o of data.items ?? []) if (!o.name.endsWith("/")) files.push(this.toFile(o, prefix));
      pageToken = data.nextPageToken;
      if (pageToken) pages.next(pageToken);
    } while (pageToken);
    return files;
  }

  private toFile(o: GcsObject, prefix: string): RemoteFile {
    const ref = `${this.objectUrl(o.name)}?alt=media&generation=${encodeURIComponent(o.generation)}`;
    return { path: safeRelativePath(relativePath(o.name, prefix), "object"), size: Number(o.size), ref };
  }

  private async getObject(name: string, signal: AbortSignal): Promise<GcsObject | undefined> {
    try {
      return (await this.client.getJson<GcsObject>(this.objectUrl(name), signal)).data;
    } catch (err) {
      if (err instanceof DownloadError && err.reason === "NotFound") return undefined;
      throw err;
    }
  }

  open(
    file: RemoteFile,
    offset: number,
    _version: string | undefined,
    signal: AbortSignal,
  ): Promise<OpenedBody> {
    return this.client.getRange(file.ref, offset, undefined, signal);
  }

  async close(): Promise<void> {
    await Promise.all([this.client.close(), this.tokenClient.close()]);
  }
}
