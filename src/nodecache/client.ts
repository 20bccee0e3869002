// What model pods say to their node's agent: `mlmodel cache-copy` (ensure, then copy an entry
// out with sha256 checks) and `mlmodel download --cache` (ensure; else upload the downloaded
// tree and commit it). Failures are the downloader's DownloadErrors, so both commands end with
// the same one-line termination message as a download.
import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { listFiles } from "../downloader/digest.ts";
import { mapBounded } from "../downloader/download.ts";
import { DownloadError, toDownloadError } from "../downloader/errors.ts";
import { copyIdHeader, type EntryFile, type EntryManifest, nodeCacheApi } from "./contract.ts";
import { downloadTo, HttpStatusError, hashingTap, requestJson, requestText } from "./http.ts";
import { validKey } from "./store.ts";

export interface AgentClientOptions {
  /** When waiting for the agent gives up (epoch ms): ensure may wait for a whole peer copy. */
  deadline: number;
  /** How long the agent may keep silent inside a file's body. */
  idleTimeoutMs: number;
  parallel: number;
  log: (line: string) => void;
  signal?: AbortSignal;
}

/** What is wrong with a flag naming the node's agent or a cache key, or undefined. */
export function agentFlagProblem(flag: string, value: string, what: "url" | "key"): string | undefined {
  if (what === "url" && !/^http:\/\/[^/]+/.test(value))
    return `${flag} "${value}" is not an http:// URL of the node cache agent, e.g. http://mlmodel-node-cache.mlmodel-system:8375`;
  if (what === "key" && !validKey(value))
    return `${flag} "${value}" is not a cache key (lowercase letters, digits and "-")`;
  return undefined;
}

/** Statuses worth asking again: the agent starting, a peer copy that failed, a busy agent. */
const retryStatuses = new Set([500, 502, 503, 504]);

/** Maps what the agent answered to the downloader's failure reasons. */
export function agentError(err: unknown, what: string): DownloadError {
  if (err instanceof DownloadError) return err;
  if (err instanceof HttpStatusError) {
    const hint =
      "see the node cache agent's log on this node (kubectl logs -l app.kubernetes.io/name=mlmodel-node-cache)";
    const cause = err;
    if (err.status === 404) return new DownloadError("NotFound", `${what}: ${err.message}`, { hint, cause });
    if (err.status === 507)
      return new DownloadError("TooLarge", `${what}: ${err.message}`, {
        hint: "the node cache's budget is too small for this model",
        cause,
      });
    if (err.status === 422)
      return new DownloadError("ChecksumMismatch", `${what}: ${err.message}`, { hint, cause });
    return new DownloadError("ServerError", `${what}: ${err.message}`, {
      transient: retryStatuses.has(err.status),
      hint,
      cause,
    });
  }
  const e = toDownloadError(err, "check that the node cache agent runs on this node");
  return new DownloadError(e.reason, `${what}: ${e.message}`, {
    cause: err,
    transient: e.transient,
    hint:
      e.hint ||
      "check that the node cache agent runs on this node (its DaemonSet in the operator's namespace)",
  });
}

export class AgentClient {
  readonly url: string;
  readonly #opts: AgentClientOptions;

  constructor(url: string, opts: AgentClientOptions) {
    this.url = url.replace(/\/+$/, "");
    this.#opts = opts;
  }

  /**
   * Asks the agent to hold KEY (copying it from a peer if needed); undefined when no agent has
   * it, or, with `peerFailureIsAbsence`, when peers hold it but every copy failed (a download
   * Job then fetches from the origin instead of waiting). With `waitForEntry`, an entry no
   * agent holds is asked for again every `waitForEntry.intervalMs` (its download may be storing
   * it, or running again) and undefined comes only at the deadline. Other transient failures
   * (the agent not up yet, a busy agent) are retried until the deadline.
   */
  async ensure(
    key: string,
    {
      verify = false,
      peerFailureIsAbsence = false,
      waitForEntry,
    }: { verify?: boolean; peerFailureIsAbsence?: boolean; waitForEntry?: { intervalMs: number } } = {},
  ): Promise<EntryManifest | undefined> {
    const url = `${this.url}${nodeCacheApi.ensure(key)}${verify ? "?verify=1" : ""}`;
    let waitSaid = false;
    for (let attempt = 1; ; attempt++) {
      const left = this.#opts.deadline - Date.now();
      try {
        return await requestJson<EntryManifest>(url, {
          method: "POST",
          idleTimeoutMs: Math.max(1000, left),
          ...(this.#opts.signal ? { signal: this.#opts.signal } : {}),
        });
      } catch (raw) {
        if (raw instanceof HttpStatusError && raw.status === 404) {
          const delay = waitForEntry
            ? Math.min(waitForEntry.intervalMs, this.#opts.deadline - Date.now())
            : 0;
          if (delay <= 0) return undefined;
          if (!waitSaid) {
            this.#opts.log(
              `waiting for cache entry ${key}: no node cache agent holds it yet (the model's download Job stores it); asking again every ${waitForEntry!.intervalMs} ms until the timeout`,
            );
            waitSaid = true;
          }
          attempt = 0;
          await this.#sleep(delay);
          continue;
        }
        if (peerFailureIsAbsence && raw instanceof HttpStatusError && raw.status === 502) {
          this.#opts.log(raw.message);
          return undefined;
        }
        const err = agentError(raw, `ensure of cache entry ${key}`);
        const delay = Math.min(5000, 250 * 2 ** Math.min(attempt, 5));
        if (!err.transient || Date.now() + delay >= this.#opts.deadline) throw err;
        this.#opts.log(`${err.message}; asking again in ${delay} ms`);
        await this.#sleep(delay);
      }
    }
  }

  #sleep(ms: number): Promise<void> {
    return sleep(ms, undefined, this.#opts.signal ? { signal: this.#opts.signal } : {});
  }

  /**
   * Copies every file of the entry under `dir`, each checked against the manifest on the way.
   * Returns the files that did not match (empty when all did).
   */
  async copyEntry(m: EntryManifest, dir: string, onBytes: (n: number) => void): Promise<string[]> {
    const bad: string[] = [];
    // One id per copy: the agent reports this copy's bytes against the entry's size.
    const headers = { [copyIdHeader]: randomBytes(8).toString("hex") };
    await mapBounded(
      m.files,
      this.#opts.parallel,
      this.#opts.signal ?? new AbortController().signal,
      async (f, signal) => {
        const got = await downloadTo(`${this.url}${nodeCacheApi.file(m.key, f.path)}`, join(dir, f.path), {
          idleTimeoutMs: this.#opts.idleTimeoutMs,
          signal,
          headers,
        }).catch((err: unknown) => {
          throw agentError(err, `copy of ${f.path} from cache entry ${m.key}`);
        });
        onBytes(got.size);
        if (got.size !== f.size || got.sha256 !== f.sha256)
          bad.push(
            `${f.path} (got ${got.size} bytes, sha256 ${got.sha256}; expected ${f.size} bytes, sha256 ${f.sha256})`,
          );
      },
    );
    return bad;
  }

  /**
   * Uploads every file under `dir` (but `skip`) to the agent, hashing each on the way, then
   * commits the entry with the manifest; the agent verifies before it publishes.
   */
  async upload(key: string, uri: string, dir: string, skip: ReadonlySet<string>): Promise<EntryManifest> {
    const paths = (await listFiles(dir, skip)).sort();
    const files = await mapBounded(
      paths,
      this.#opts.parallel,
      this.#opts.signal ?? new AbortController().signal,
      (path, signal) => this.#put(key, dir, path, signal),
    );
    const manifest: EntryManifest = { key, uri, files, size: files.reduce((s, f) => s + f.size, 0) };
    try {
      return await requestJson<EntryManifest>(`${this.url}${nodeCacheApi.commit(key)}`, {
        method: "POST",
        body: JSON.stringify(manifest),
        headers: { "content-type": "application/json" },
        idleTimeoutMs: Math.max(60_000, this.#opts.idleTimeoutMs),
      });
    } catch (err) {
      throw agentError(err, `commit of cache entry ${key}`);
    }
  }

  async #put(key: string, dir: string, path: string, signal: AbortSignal): Promise<EntryFile> {
    const full = join(dir, path);
    const { size } = await stat(full);
    const { tap, result } = hashingTap();
    const body = createReadStream(full, { highWaterMark: 1 << 20 }).pipe(tap);
    try {
      await requestText(`${this.url}${nodeCacheApi.file(key, path)}`, {
        method: "PUT",
        body,
        headers: { "content-type": "application/octet-stream", "content-length": size },
        idleTimeoutMs: this.#opts.idleTimeoutMs,
        signal,
      });
    } catch (err) {
      throw agentError(err, `upload of ${path} to cache entry ${key}`);
    }
    return { path, size, sha256: result().sha256 };
  }
}
