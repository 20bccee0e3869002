// `mlmodel cache-copy --cache URL --key KEY --dest DIR`: the serving pods' init container. A
// DEST already complete for KEY is kept without asking anything (an init container restarted
// with its emptyDir). Else it asks its node's agent to hold KEY (a peer copy if needed),
// waiting while no agent holds it (its download Job is storing it, or runs again), copies the
// entry into a partial directory beside DEST checking every file's sha256, and publishes DEST
// by one rename with a completion marker inside. A file that does not verify makes the agent
// re-verify its entry (dropping and fetching it again when corrupt) and the copy is tried once
// more.
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import {
  type CompletionMarker,
  completionMarkerName,
  exitCodes,
  partialDirFor,
} from "../../downloader/contract.ts";
import { contentDigest } from "../../downloader/digest.ts";
import { publish, readMarker, refuseForeignDest } from "../../downloader/download.ts";
import { DownloadError, failureLine, toDownloadError } from "../../downloader/errors.ts";
import { formatBytes } from "../../downloader/progress.ts";
import { AgentClient, agentFlagProblem } from "../../nodecache/client.ts";
import type { EntryManifest } from "../../nodecache/contract.ts";
import { CliError } from "../errors.ts";
import { parsePositiveInt, writeTerminationLog } from "./download.ts";

export const summary = "copy a node cache entry into a directory (serving pods' init container)";

const help = `Usage: mlmodel cache-copy --cache URL --key KEY --dest DIR [flags]

Flags:
  --cache URL          the node cache agent of this node (the mlmodel-node-cache Service's URL)
  --key KEY            the cache key of the model version
  --dest DIR           directory to publish into (its parent must be writable: the partial copy
                       goes beside it, so DEST appears whole or not at all)
  --timeout S          seconds to wait for the agent in all, a peer copy and the wait for an
                       entry no agent holds yet included (default 3600)
  --idle-timeout S     seconds the agent may keep silent inside a file (default 60)
  --parallel N         files copied at once (default 4)
  --quiet              no progress lines on stderr

Exit 0 when DEST is complete; 1 with one line on stderr and in the termination log otherwise.`;

/** The downloader's completion marker, with the cache key a restarted copy compares. */
export interface CacheCopyMarker extends CompletionMarker {
  cacheKey: string;
}

function flags(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      strict: true,
      options: {
        cache: { type: "string" },
        key: { type: "string" },
        dest: { type: "string" },
        timeout: { type: "string" },
        "idle-timeout": { type: "string" },
        parallel: { type: "string" },
        quiet: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    throw new CliError(`${(err as Error).message}\n\n${help}`, 2);
  }
}

/** Checks the flags; a wrong one exits 2 with a line in the termination log too. */
function options(argv: string[]) {
  const f = flags(argv);
  if (f.help) return undefined;
  const need = (flag: string, v: string | undefined) => {
    if (!v) throw new CliError(`${flag} is required\n\n${help}`, 2);
    return v;
  };
  const cache = need("--cache", f.cache);
  const key = need("--key", f.key);
  const problem = agentFlagProblem("--cache", cache, "url") ?? agentFlagProblem("--key", key, "key");
  if (problem) throw new CliError(problem, 2);
  return {
    cache,
    key,
    dest: need("--dest", f.dest).replace(/\/+$/, ""),
    timeoutMs: parsePositiveInt("--timeout", f.timeout, 3600) * 1000,
    idleTimeoutMs: parsePositiveInt("--idle-timeout", f["idle-timeout"], 60) * 1000,
    parallel: parsePositiveInt("--parallel", f.parallel, 4),
    quiet: f.quiet === true,
  };
}

export async function run(argv: string[]): Promise<number> {
  let opts: ReturnType<typeof options>;
  try {
    opts = options(argv);
  } catch (err) {
    if (err instanceof CliError)
      writeTerminationLog(`cache-copy: InvalidArgument: ${err.message.split("\n")[0]}`);
    throw err;
  }
  if (!opts) {
    console.log(help);
    return 0;
  }
  const log = (line: string) => {
    if (!opts.quiet) process.stderr.write(`${line}\n`);
  };
  try {
    await cacheCopy({ ...opts, log });
    return exitCodes.ok;
  } catch (raw) {
    const err = raw instanceof DownloadError ? raw : toDownloadError(raw);
    const line = failureLine(`cache entry ${opts.key}`, err);
    process.stderr.write(`${line}\n`);
    writeTerminationLog(line);
    return exitCodes.failed;
  }
}

export interface CacheCopyOptions {
  cache: string;
  key: string;
  dest: string;
  timeoutMs: number;
  idleTimeoutMs: number;
  parallel: number;
  log: (line: string) => void;
  /** How often an entry no agent holds is asked for again (default 2 s). */
  pollMs?: number;
}

/** How often an entry no agent holds is asked for again: soon after its download stores it. */
const defaultPollMs = 2000;

/** The copy itself (what run() does after its flags): resolves with DEST's completion marker. */
export async function cacheCopy(opts: CacheCopyOptions): Promise<CacheCopyMarker> {
  // The marker is written inside the copy before DEST is published by one rename: a DEST
  // whose marker names the key is whole, and needs nothing from the agent.
  const existing = (await readMarker(opts.dest)) as CacheCopyMarker | undefined;
  if (existing?.cacheKey === opts.key) {
    opts.log(`already complete: ${opts.dest} (entry ${opts.key})`);
    return existing;
  }
  const client = new AgentClient(opts.cache, {
    deadline: Date.now() + opts.timeoutMs,
    idleTimeoutMs: opts.idleTimeoutMs,
    parallel: opts.parallel,
    log: opts.log,
  });
  const waitForEntry = { intervalMs: opts.pollMs ?? defaultPollMs };
  const ensured = await client.ensure(opts.key, { waitForEntry });
  if (!ensured) {
    throw new DownloadError("NotFound", `no node cache agent holds entry ${opts.key}`, {
      hint: "the model's download Job has not stored it yet, or every node holding it is gone (the operator then runs the Job again); check the MLModel's status and Events",
    });
  }
  if (!existing) await refuseForeignDest(opts.dest);
  const partial = partialDirFor(opts.dest);
  let manifest = ensured;
  let bad = await copyOnce(client, manifest, partial, opts);
  if (bad.length > 0) {
    opts.log(
      `${bad.length} file(s) did not verify: ${bad[0]}; asking the agent to re-verify entry ${opts.key}`,
    );
    const again = await client.ensure(opts.key, { verify: true, waitForEntry });
    if (!again)
      throw new DownloadError("NotFound", `entry ${opts.key} was dropped as corrupt and no peer holds it`, {
        hint: "no node holds a verified copy any more: the model must be downloaded from its origin again",
      });
    manifest = again;
    bad = await copyOnce(client, manifest, partial, opts);
    if (bad.length > 0) {
      await rm(partial, { recursive: true, force: true });
      throw new DownloadError(
        "ChecksumMismatch",
        `${bad.length} file(s) of entry ${opts.key} did not verify twice: ${bad[0]}`,
        {
          hint: "the node's disk or the agent may be failing; see the node cache agent's log on this node",
        },
      );
    }
  }
  const marker: CacheCopyMarker = {
    version: 1,
    uri: manifest.uri,
    ...contentDigest(manifest.files),
    files: manifest.files.length,
    bytes: manifest.size,
    extracted: false,
    completedAt: new Date().toISOString(),
    cacheKey: opts.key,
  };
  const content = join(partial, "content");
  await writeFile(join(content, completionMarkerName), `${JSON.stringify(marker, null, 2)}\n`);
  await publish(content, opts.dest, partial);
  opts.log(
    `copied entry ${opts.key}: ${manifest.files.length} file(s), ${formatBytes(manifest.size)} into ${opts.dest}`,
  );
  return marker;
}

/** One copy into PARTIAL/content (from scratch); returns the files that did not verify. */
async function copyOnce(client: AgentClient, m: EntryManifest, partial: string, opts: CacheCopyOptions) {
  const content = join(partial, "content");
  await rm(partial, { recursive: true, force: true });
  await mkdir(content, { recursive: true });
  let done = 0;
  return client
    .copyEntry(m, content, (n) => {
      done += n;
    })
    .finally(() => opts.log(`copied ${formatBytes(done)} of ${formatBytes(m.size)}`));
}
