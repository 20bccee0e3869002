// s3:// with the AWS SDK v3: any S3-compatible endpoint, region, path-style, custom CA; static
// keys from env/files, otherwise the SDK's default chain (web identity, container, instance).
import https from "node:https";
import type { Readable } from "node:stream";
import {
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  S3Client,
  type S3ClientConfig,
} from "@aws-sdk/client-s3";
import { credentialNames } from "../contract.ts";
import type { Credentials } from "../credentials.ts";
import { DownloadError, errorForStatus, isTimeout, requestTimedOut, toDownloadError } from "../errors.ts";
import { safeRelativePath } from "../paths.ts";
import {
  type OpenedBody,
  PageBound,
  parseContentRange,
  type RemoteFile,
  relativePath,
  type Source,
  type SourceLimits,
} from "./source.ts";

const names = credentialNames.s3;

function clientConfig(creds: Credentials, limits: SourceLimits): S3ClientConfig {
  const region = creds.get(names.region) ?? creds.get("AWS_DEFAULT_REGION") ?? "us-east-1";
  const endpoint = creds.get(names.endpoint) ?? creds.get("AWS_ENDPOINT_URL");
  const config: S3ClientConfig = {
    region,
    forcePathStyle: creds.get(names.forcePathStyle) === "true",
    // Our own retry loop decides what is transient and resumes mid-object.
    maxAttempts: 1,
  };
  if (endpoint) config.endpoint = endpoint;
  const accessKeyId = creds.get(names.accessKeyId);
  const secretAccessKey = creds.get(names.secretAccessKey);
  if (accessKeyId && secretAccessKey) {
    const sessionToken = creds.get(names.sessionToken);
    config.credentials = { accessKeyId, secretAccessKey, ...(sessionToken ? { sessionToken } : {}) };
  } else if (accessKeyId || secretAccessKey) {
    throw new DownloadError(
      "InvalidArgument",
      `only one of ${names.accessKeyId} and ${names.secretAccessKey} is set`,
      {
        hint: creds.secretHint("both keys"),
      },
    );
  }
  const ca = creds.caCertificates();
  const timeout = limits.requestTimeoutMs;
  config.requestHandler = {
    httpsAgent: new https.Agent({ keepAlive: true, maxSockets: 64, ...(ca ? { ca } : {}) }),
    // Without these the SDK waits for ever on a server that takes the request and keeps silent:
    // the connection, the answer and every pause in a body are bounded.
    connectionTimeout: timeout,
    requestTimeout: timeout,
    throwOnRequestTimeout: true,
    socketTimeout: timeout,
  };
  return config;
}

interface SdkError {
  name?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
  $retryable?: unknown;
}

export class S3Source implements Source {
  private readonly client: S3Client;
  private readonly bucket: string;
  private readonly key: string;
  private readonly hint: string;
  private readonly timeoutMs: number;
  private readonly maxListPages: number;
  constructor(loc: { bucket: string; key: string }, creds: Credentials, limits: SourceLimits) {
    this.maxListPages = limits.maxListPages;
    this.client = new S3Client(clientConfig(creds, limits));
    this.timeoutMs = limits.requestTimeoutMs;
    this.bucket = loc.bucket;
    this.key = loc.key;
    this.hint = creds.secretHint(`${names.accessKeyId}/${names.secretAccessKey} (or the pod's web identity)`);
  }

  /** SDK errors carry the S3 code (AccessDenied, NoSuchBucket) and the HTTP status. */
  private mapError(err: unknown, what: string): DownloadError {
    const e = err as SdkError;
    const status = e?.$metadata?.httpStatusCode;
    const code = e?.Code ?? e?.name;
    if (isTimeout(err)) return requestTimedOut(what, this.timeoutMs, err);
    if (e?.name === "CredentialsProviderError") {
      return new DownloadError("AccessDenied", (err as Error).message, { hint: this.hint });
    }
    if (status === undefined) return toDownloadError(err, this.hint);
    const mapped = errorForStatus(status, `${what}: ${code ?? "error"}`, this.hint);
    if (code === "NoSuchBucket")
      return new DownloadError("NotFound", `bucket ${this.bucket} does not exist`, { hint: "check the URI" });
    if (e.$retryable || code === "SlowDown" || code === "RequestTimeout") {
      return new DownloadError("ServerError", mapped.message, { transient: true, hint: mapped.hint });
    }
    return mapped;
  }

  async list(signal: AbortSignal): Promise<RemoteFile[]> {
    if (this.key !== "" && !this.key.endsWith("/")) {
      const single = await this.headIfObject(signal);
      if (single) return [single];
    }
    const prefix = this.key === "" || this.key.endsWith("/") ? this.key : `${this.key}/`;
    const files: RemoteFile[] = [];
    const pages = new PageBound(`s3://${this.bucket}/${prefix}`, this.maxListPages, names.endpoint);
    let token: string | undefined;
    do {
      const page = await this.client
        .send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, ContinuationToken: token }), {
          abortSignal: signal,
        })
        .catch((err: unknown) => {
          throw this.mapError(err, `list s3://${this.bucket}/${prefix}`);
        });
      for (const o of page.Contents ?? []) {
        if (!o.Key || o.Key.endsWith("/")) continue; // "folder" placeholder objects
        files.push({
          path: safeRelativePath(relativePath(o.Key, prefix), "object"),
          size: o.Size ?? 0,
          ref: o.Key,
        });
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
      if (token) pages.next(token);
    } while (token);
    return files;
  }

  /** The key names one object (HEAD 200), or it is a prefix (404). */
  private async headIfObject(signal: AbortSignal): Promise<RemoteFile | undefined> {
    try {
      const head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.key }), {
        abortSignal: signal,
      });
      return {
        path: safeRelativePath(relativePath(this.key, this.key), "object"),
        size: head.ContentLength ?? 0,
        ref: this.key,
      };
    } catch (err) {
      if ((err as SdkError).$metadata?.httpStatusCode === 404) return undefined;
      throw this.mapError(err, `head s3://${this.bucket}/${this.key}`);
    }
  }

  async open(
    file: RemoteFile,
    offset: number,
    version: string | undefined,
    signal: AbortSignal,
  ): Promise<OpenedBody> {
    const ranged = offset > 0 ? { Range: `bytes=${offset}-`, ...(version ? { IfMatch: version } : {}) } : {};
    try {
      const res = await this.client.send(
        new GetObjectCommand({ Bucket: this.bucket, Key: file.ref, ...ranged }),
        {
          abortSignal: signal,
        },
      );
      const range = parseContentRange(res.ContentRange);
      const opened: OpenedBody = { body: res.Body as Readable, offset: range ? range.start : 0 };
      const size = range?.total ?? (range ? undefined : res.ContentLength);
      if (size !== undefined) opened.size = size;
      if (res.ETag) opened.version = res.ETag;
      return opened;
    } catch (err) {
      // 412: the object changed since the part was written; 416: the part is already whole
      // or longer than the object. Either way, start this file again from byte 0.
      const status = (err as SdkError).$metadata?.httpStatusCode;
      if (offset > 0 && (status === 412 || status === 416)) return this.open(file, 0, undefined, signal);
      throw this.mapError(err, `get s3://${this.bucket}/${file.ref}`);
    }
  }

  async close(): Promise<void> {
    this.client.destroy();
  }
}
