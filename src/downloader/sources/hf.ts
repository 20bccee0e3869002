// hf://org/repo[@revision][/path] over the Hugging Face hub's HTTP API, as huggingface_hub uses
// it: the revision is pinned to a commit first (GET /api/models/{repo}/revision/{rev}), the
// files are listed from that commit's tree, and each is read from /{repo}/resolve/{sha}/{path}
// (which may redirect to a CDN). The token goes to HF_ENDPOINT's origin only.
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

const names = credentialNames.hf;

interface TreeEntry {
  type: "file" | "directory";
  path: string;
  size?: number;
  lfs?: { size?: number };
}

function encodePath(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

/** The `rel="next"` target of a Link header (the hub pages long trees this way). */
export function nextLink(link: unknown): string | undefined {
  const value = Array.isArray(link) ? link.join(",") : typeof link === "string" ? link : "";
  return /<([^>]+)>\s*;\s*rel="?next"?/.exec(value)?.[1];
}

export class HfSource implements Source {
  private readonly client: HttpClient;
  private readonly endpoint: string;
  private readonly repo: string;
  private readonly revision: string;
  private readonly path: string;
  private readonly maxListPages: number;
  constructor(
    loc: { repo: string; revision: string; path: string },
    creds: Credentials,
    limits: SourceLimits,
  ) {
    this.maxListPages = limits.maxListPages;
    this.repo = loc.repo;
    this.revision = loc.revision;
    this.path = loc.path.replace(/\/$/, "");
    this.endpoint = (creds.get(names.endpoint) ?? "https://huggingface.co").replace(/\/$/, "");
    const token = creds.get(names.token);
    const ca = creds.caCertificates();
    this.client = new HttpClient({
      // A next-page Link or a /resolve/ redirect to another origin (a CDN) gets no token.
      credentialOrigin: this.endpoint,
      requestTimeoutMs: limits.requestTimeoutMs,
      authHint: creds.secretHint(`${names.token} (a token with read access to ${loc.repo})`),
      ...(token ? { headers: { authorization: `Bearer ${token}` } } : {}),
      ...(ca ? { ca } : {}),
    });
  }

  private async commitSha(signal: AbortSignal): Promise<string> {
    const url = `${this.endpoint}/api/models/${this.repo}/revision/${encodeURIComponent(this.revision)}`;
    const { data } = await this.client.getJson<{ sha?: string }>(url, signal);
    if (!data.sha) {
      throw new DownloadError("ServerError", `${url} answered without a commit sha`, {
        hint: `check ${names.endpoint}`,
      });
    }
    return data.sha;
  }

  async list(signal: AbortSignal): Promise<RemoteFile[]> {
    const sha = await this.commitSha(signal);
    const files: RemoteFile[] = [];
    const under = this.path ? `/${encodePath(this.path)}` : "";
    const pages = new PageBound(`hf://${this.repo}@${sha}${under}`, this.maxListPages, names.endpoint);
    let url: string | undefined =
      `${this.endpoint}/api/models/${this.repo}/tree/${sha}${under}?recursive=true`;
    while (url) {
      const { data, headers } = await this.client.getJson<TreeEntry[]>(url, signal);
      for (const e of data) {
        if (e.type !== "file") continue;
        const rel = this.path ? relativePath(e.path, this.path) : e.path;
        const resolve = `${this.endpoint}/${this.repo}/resolve/${sha}/${encodePath(e.path)}`;
        files.push({ path: safeRelativePath(rel, "object"), size: e.lfs?.size ?? e.size ?? 0, ref: resolve });
      }
      const next = nextLink(headers.link);
      url = next ? new URL(next, this.endpoint).href : undefined;
      if (url) pages.next(url);
    }
    return files;
  }

  /** Files are read at a pinned commit, so a resume can always ask for a plain Range. */
  open(
    file: RemoteFile,
    offset: number,
    _version: string | undefined,
    signal: AbortSignal,
  ): Promise<OpenedBody> {
    return this.client.getRange(file.ref, offset, undefined, signal);
  }

  close(): Promise<void> {
    return this.client.close();
  }
}
