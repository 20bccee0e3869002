// Azure Blob (azblob://account/container/prefix or https://account.blob.core.windows.net/...)
// with @azure/storage-blob: a connection string, a SAS token, or anonymous for public containers;
// the CA bundle (MLMODEL_CA_BUNDLE or ca.crt) is trusted for an https endpoint.

import https from "node:https";
import type { Readable } from "node:stream";
import {
  type AnonymousCredential,
  BlobServiceClient,
  type ContainerClient,
  Pipeline,
  type RequestPolicyFactory,
  type StoragePipelineOptions,
  type StorageSharedKeyCredential,
} from "@azure/storage-blob";
import { credentialNames } from "../contract.ts";
import type { Credentials } from "../credentials.ts";
import { DownloadError, errorForStatus, isTimeout, requestTimedOut, toDownloadError } from "../errors.ts";
import { safeRelativePath } from "../paths.ts";
import {
  type OpenedBody,
  PageBound,
  parseContentRange,
  type RemoteFile,
  type Source,
  type SourceLimits,
} from "./source.ts";

const names = credentialNames.azure;

// Our retry loop decides what is transient and resumes mid-blob; the SDK's own would restart.
const pipelineOptions: StoragePipelineOptions = { retryOptions: { maxTries: 1 } };

/**
 * Bounds each request until its answer starts (the SDK's retry option tryTimeoutInMs only asks
 * the service for a server-side timeout, which a silent server ignores): the SDK's HTTP client
 * aborts a request at its `timeout`, and this policy tells that abort from the caller's. A body
 * that stops is bounded by the download's idle guard (fetch-file.ts).
 */
function requestTimeoutPolicy(timeoutMs: number): RequestPolicyFactory {
  return {
    create: (next) => ({
      sendRequest: async (request) => {
        request.timeout = timeoutMs;
        try {
          return await next.sendRequest(request);
        } catch (err) {
          if ((err as Error)?.name !== "AbortError" || request.abortSignal?.aborted) throw err;
          throw Object.assign(new Error(`no answer within ${timeoutMs} ms`), {
            name: "TimeoutError",
            cause: err,
          });
        }
      },
    }),
  };
}

function serviceClient(account: string, creds: Credentials, limits: SourceLimits): BlobServiceClient {
  const client = plainServiceClient(account, creds);
  const policies = [requestTimeoutPolicy(limits.requestTimeoutMs)];
  const ca = creds.caCertificates();
  if (ca) {
    // The SDK's HTTP client has no CA option, but honours an agent set on the request: a
    // request policy gives every https request one that trusts the system roots plus the bundle.
    const agent = new https.Agent({ keepAlive: true, ca });
    policies.push({
      create: (next) => ({
        sendRequest: (request) => {
          if (request.url.startsWith("https:")) request.agent = agent;
          return next.sendRequest(request);
        },
      }),
    });
  }
  // Same URL (SAS included) and credential (shared key or anonymous), our policies added.
  const credential = client.credential as StorageSharedKeyCredential | AnonymousCredential;
  return new BlobServiceClient(client.url, new Pipeline([credential, ...policies], pipelineOptions));
}

function plainServiceClient(account: string, creds: Credentials): BlobServiceClient {
  const connectionString = creds.get(names.connectionString);
  if (connectionString) return BlobServiceClient.fromConnectionString(connectionString, pipelineOptions);
  const endpoint = (creds.get(names.blobEndpoint) ?? `https://${account}.blob.core.windows.net`).replace(
    /\/$/,
    "",
  );
  const sas = creds.get(names.sasToken)?.replace(/^\?/, "");
  return new BlobServiceClient(sas ? `${endpoint}?${sas}` : endpoint, undefined, pipelineOptions);
}

interface RestError {
  statusCode?: number;
  code?: string;
}

export class AzureSource implements Source {
  private readonly container: ContainerClient;
  private readonly prefix: string;
  private readonly hint: string;
  private readonly where: string;
  private readonly timeoutMs: number;
  private readonly maxListPages: number;
  constructor(
    loc: { account: string; container: string; prefix: string },
    creds: Credentials,
    limits: SourceLimits,
  ) {
    this.maxListPages = limits.maxListPages;
    this.container = serviceClient(loc.account, creds, limits).getContainerClient(loc.container);
    this.timeoutMs = limits.requestTimeoutMs;
    this.prefix = loc.prefix;
    this.where = `${loc.account}/${loc.container}`;
    this.hint = creds.secretHint(`${names.connectionString} or ${names.sasToken}`);
  }

  private mapError(err: unknown, what: string): DownloadError {
    const e = err as RestError;
    if (isTimeout(err)) return requestTimedOut(what, this.timeoutMs, err);
    if (e?.statusCode === undefined) return toDownloadError(err, this.hint);
    if (e.code === "ContainerNotFound") {
      return new DownloadError("NotFound", `container ${this.where} does not exist`, {
        hint: "check the URI",
      });
    }
    return errorForStatus(e.statusCode, `${what}: ${e.code ?? "error"}`, this.hint);
  }

  async list(signal: AbortSignal): Promise<RemoteFile[]> {
    const files: RemoteFile[] = [];
    const exact = this.prefix !== "" && !this.prefix.endsWith("/");
    const dirPrefix = this.prefix === "" || this.prefix.endsWith("/") ? this.prefix : `${this.prefix}/`;
    try {
      // One listing by the bare prefix finds both the blob named exactly so and those under "prefix/".
      const pages = new PageBound(
        `azblob://${this.where}/${this.prefix}`,
        this.maxListPages,
        names.blobEndpoint,
      );
      const listing = this.container.listBlobsFlat({ prefix: this.prefix, abortSignal: signal }).byPage();
      for await (const page of listing) {
        for (const blob of page.segment.blobItems) {
          const size = blob.properties.contentLength ?? 0;
          if (exact && blob.name === this.prefix) {
            return [
              {
                path: safeRelativePath(blob.name.slice(blob.name.lastIndexOf("/") + 1), "object"),
                size,
                ref: blob.name,
              },
            ];
          }
          if (!blob.name.startsWith(dirPrefix) || blob.name.endsWith("/")) continue;
          files.push({
            path: safeRelativePath(blob.name.slice(dirPrefix.length), "object"),
            size,
            ref: blob.name,
          });
        }
        if (page.continuationToken) pages.next(page.continuationToken);
      }
    } catch (err) {
      throw this.mapError(err, `list ${this.where}/${this.prefix}`);
    }
    return files;
  }

  async open(
    file: RemoteFile,
    offset: number,
    version: string | undefined,
    signal: AbortSignal,
  ): Promise<OpenedBody> {
    const blob = this.container.getBlobClient(file.ref);
    try {
      const res = await blob.download(offset, undefined, {
        abortSignal: signal,
        maxRetryRequests: 0,
        ...(offset > 0 && version ? { conditions: { ifMatch: version } } : {}),
      });
      const opened: OpenedBody = { body: res.readableStreamBody as Readable, offset };
      const total = parseContentRange(res.contentRange)?.total;
      if (total !== undefined) opened.size = total;
      else if (res.contentLength !== undefined) opened.size = offset + res.contentLength;
      if (res.etag) opened.version = res.etag;
      return opened;
    } catch (err) {
      // 412: changed since the part was written; 416: the part is already as long as the blob.
      const status = (err as RestError).statusCode;
      if (offset > 0 && (status === 412 || status === 416)) return this.open(file, 0, undefined, signal);
      throw this.mapError(err, `get ${this.where}/${file.ref}`);
    }
  }
}
