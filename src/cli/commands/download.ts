// `mlmodel download --uri URI --dest DIR [--sha256 HEX]`: what the download Job runs.
// Exit 0 = DEST holds the complete model (or pvc:// content verified in place); exit 1 = failed,
// exit 2 = bad flags, with one line `<uri>: <Reason>: <detail>` on stderr and in the termination log.
// Every line it prints shows the URI redacted (credentials in it hidden); only the download
// itself uses the exact URI, which the Job passes through --uri-from-env when it has credentials.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import {
  type CachedDownloadResult,
  defaultCacheTimeoutMs,
  downloadThroughCache,
  fromNodeCacheStatus,
  type NodeCacheTarget,
} from "../../downloader/cache-upload.ts";
import {
  exitCodes,
  modelUriEnv,
  progressIntervalMs,
  terminationLogEnv,
  terminationLogPath,
} from "../../downloader/contract.ts";
import { normalizeSha256 } from "../../downloader/digest.ts";
import { type DownloadOptions, defaultDownloadOptions, download } from "../../downloader/download.ts";
import { DownloadError, failureLine, toDownloadError } from "../../downloader/errors.ts";
import { formatBytes, Progress, progressLine } from "../../downloader/progress.ts";
import { redactUri, uriScrubber } from "../../downloader/redact.ts";
import { kubeConfigSender, StatusReporter, statusTargetFromEnv } from "../../downloader/status-reporter.ts";
import { agentFlagProblem } from "../../nodecache/client.ts";
import { CliError } from "../errors.ts";

export const summary = "Download a model into a directory (run by the download Job)";

const help = `Usage: mlmodel download (--uri URI | --uri-from-env VAR) --dest DIR [--sha256 HEX] [flags]

URI forms: https://host/file, s3://bucket/prefix, gs://bucket/prefix,
  azblob://account/container/prefix (or https://account.blob.core.windows.net/...),
  hf://org/repo[@revision][/path], pvc://claim/path (verified in place, not copied)

Flags:
  --uri URI            where the model is (this or --uri-from-env is required)
  --uri-from-env VAR   read the URI from environment variable VAR (the Job sets ${modelUriEnv} from a
                       Secret when the URI has credentials in it, e.g. a pre-signed URL)
  --dest DIR           directory to publish into; must not exist or be replaceable (required but for pvc://)
  --sha256 HEX         expected digest (of the object, or of the sorted manifest for a prefix)
  --parallel N         files downloaded at once (default ${defaultDownloadOptions.parallel})
  --max-size SIZE      refuse more than SIZE bytes in all, e.g. 50Gi (default 1Ti)
  --max-expansion N    refuse archives that unpack to more than N times their size (default ${defaultDownloadOptions.maxExpansionRatio})
  --no-extract         keep a .tar.gz/.tgz/.zip as it is
  --retries N          attempts per request for transient errors (default ${defaultDownloadOptions.retry.attempts})
  --request-timeout S  seconds a server may keep silent, before its answer or inside a body (default ${defaultDownloadOptions.requestTimeoutMs / 1000})
  --max-list-pages N   pages one listing may take before it is refused (default ${defaultDownloadOptions.maxListPages})
  --quiet              no progress lines on stderr
  --cache URL          node-cache mode: the node's cache agent; with --cache-key, ask it for the
                       model first (copied from a peer node, 0 bytes from the origin) and, when no
                       agent holds it, download into --dest then store the files in the cache
  --cache-key KEY      the model version's cache key (required with --cache)
  --cache-timeout S    seconds to wait for the agent in all, a peer copy included (default ${defaultCacheTimeoutMs / 1000})

Credentials, CA bundle, progress reporting and the termination log: see docs/downloader.md.`;

const sizeUnits: Record<string, number> = {
  "": 1,
  k: 1e3,
  m: 1e6,
  g: 1e9,
  t: 1e12,
  ki: 1024,
  mi: 1024 ** 2,
  gi: 1024 ** 3,
  ti: 1024 ** 4,
};

export function parseSize(flag: string, value: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?$/i.exec(value.trim());
  const unit = sizeUnits[(m?.[2] ?? "").toLowerCase()];
  if (!m || unit === undefined)
    throw new CliError(`${flag} "${value}" is not a size; expected e.g. 500Mi, 20Gi or 1073741824`, 2);
  return Math.floor(Number(m[1]) * unit);
}

export function parsePositiveInt(flag: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1)
    throw new CliError(`${flag} "${value}" must be a whole number of at least 1`, 2);
  return n;
}

function parseFlags(argv: string[]) {
  try {
    return parseArgs({
      args: argv,
      strict: true,
      options: {
        uri: { type: "string" },
        "uri-from-env": { type: "string" },
        dest: { type: "string" },
        sha256: { type: "string" },
        parallel: { type: "string" },
        "max-size": { type: "string" },
        "max-expansion": { type: "string" },
        "no-extract": { type: "boolean" },
        retries: { type: "string" },
        "request-timeout": { type: "string" },
        "max-list-pages": { type: "string" },
        quiet: { type: "boolean" },
        cache: { type: "string" },
        "cache-key": { type: "string" },
        "cache-timeout": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    throw new CliError(`${(err as Error).message}\n\n${help}`, 2);
  }
}

export function writeTerminationLog(line: string): void {
  const path = process.env[terminationLogEnv] || terminationLogPath;
  try {
    writeFileSync(path, `${line}\n`);
  } catch {
    // Outside a pod /dev/termination-log does not exist; stderr has the line already.
  }
}

/**
 * Bad flags exit 2 (a final verdict, like exit 1: the Job fails at once) with one line in the
 * termination log too, so the MLModel's condition says what is wrong with the Job's args.
 */
export async function run(argv: string[]): Promise<number> {
  try {
    return await runDownload(argv);
  } catch (err) {
    if (err instanceof CliError && err.exitCode === exitCodes.usage)
      writeTerminationLog(usageLine(argv, err));
    throw err;
  }
}

function flagValue(argv: string[], flag: string): string | undefined {
  const at = argv.indexOf(flag);
  return at >= 0 ? argv[at + 1] : argv.find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1);
}

export function usageLine(argv: string[], err: Error, env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = flagValue(argv, "--uri-from-env");
  const uri = flagValue(argv, "--uri") || (fromEnv ? env[fromEnv] : undefined);
  const first = err.message.split("\n")[0];
  const line = `${uri || "mlmodel download"}: InvalidArgument: ${first}; check the download Job's args (mlmodel download --help)`;
  return uri ? uriScrubber(uri)(line) : line;
}

/** The exact URI: from --uri, or from the environment variable --uri-from-env names. */
function exactUri(flags: { uri?: string; "uri-from-env"?: string }): string {
  const name = flags["uri-from-env"];
  if (flags.uri !== undefined && name !== undefined)
    throw new CliError(`give --uri or --uri-from-env, not both\n\n${help}`, 2);
  if (name === undefined) {
    if (!flags.uri) throw new CliError(`--uri (or --uri-from-env) is required\n\n${help}`, 2);
    return flags.uri;
  }
  const uri = process.env[name];
  if (!uri)
    throw new CliError(
      `--uri-from-env ${name}: the environment variable ${name} is not set or empty (the download Job sets it from the model's URI Secret)`,
      2,
    );
  return uri;
}

async function runDownload(argv: string[]): Promise<number> {
  const flags = parseFlags(argv);
  if (flags.help) {
    console.log(help);
    return 0;
  }
  const uri = exactUri(flags);
  // Whatever is printed or reported (progress, errors an SDK or a server echoed) goes through it.
  const scrub = uriScrubber(uri);
  const quiet = flags.quiet === true;
  const log = (line: string) => {
    if (!quiet) process.stderr.write(`${scrub(line)}\n`);
  };
  const progress = new Progress();
  const controller = new AbortController();
  const reporter = await startReporter(log);
  const timer = setInterval(() => {
    const s = progress.snapshot();
    reporter?.tick(s);
    if (s.phase === "Downloading") log(progressLine(s));
  }, progressIntervalMs);
  timer.unref();
  try {
    const retry = {
      ...defaultDownloadOptions.retry,
      attempts: parsePositiveInt("--retries", flags.retries, defaultDownloadOptions.retry.attempts),
    };
    const opts: DownloadOptions = {
      ...defaultDownloadOptions,
      uri,
      ...(flags.dest ? { dest: flags.dest } : {}),
      ...(flags.sha256 ? { sha256: normalizeSha256(flags.sha256) } : {}),
      parallel: parsePositiveInt("--parallel", flags.parallel, defaultDownloadOptions.parallel),
      maxBytes: flags["max-size"]
        ? parseSize("--max-size", flags["max-size"])
        : defaultDownloadOptions.maxBytes,
      maxExpansionRatio: parsePositiveInt(
        "--max-expansion",
        flags["max-expansion"],
        defaultDownloadOptions.maxExpansionRatio,
      ),
      extract: flags["no-extract"] !== true,
      retry,
      requestTimeoutMs:
        parsePositiveInt(
          "--request-timeout",
          flags["request-timeout"],
          defaultDownloadOptions.requestTimeoutMs / 1000,
        ) * 1000,
      maxListPages: parsePositiveInt(
        "--max-list-pages",
        flags["max-list-pages"],
        defaultDownloadOptions.maxListPages,
      ),
      env: process.env,
      signal: controller.signal,
      log,
      progress,
    };
    const cache = nodeCacheTarget(flags);
    const result = cache ? await downloadThroughCache(opts, cache) : await download(opts);
    progress.setPhase(
      "Complete",
      cache && result.state !== "FromNodeCache"
        ? "downloaded from the origin and stored in the node cache"
        : undefined,
    );
    const final = progress.snapshot();
    await reporter?.flush(
      result.state === "FromNodeCache" ? fromNodeCacheStatus(final, result.manifest) : final,
    );
    log(resultLine(result));
    return exitCodes.ok;
  } catch (raw) {
    if (raw instanceof CliError) throw raw;
    const err = raw instanceof DownloadError ? raw : toDownloadError(raw);
    const line = scrub(failureLine(redactUri(uri), err));
    progress.setPhase("Failed", line);
    await reporter?.flush(progress.snapshot());
    process.stderr.write(`${line}\n`);
    writeTerminationLog(line);
    return exitCodes.failed;
  } finally {
    clearInterval(timer);
  }
}

async function startReporter(log: (l: string) => void): Promise<StatusReporter | undefined> {
  const target = statusTargetFromEnv(process.env);
  if (!target) return undefined;
  try {
    return new StatusReporter(target, await kubeConfigSender(), log);
  } catch (err) {
    log(`warning: cannot report progress to ${target.namespace}/${target.name}: ${(err as Error).message}`);
    return undefined;
  }
}

/** --cache and --cache-key, both or neither. */
function nodeCacheTarget(flags: {
  cache?: string;
  "cache-key"?: string;
  "cache-timeout"?: string;
}): NodeCacheTarget | undefined {
  const url = flags.cache;
  const key = flags["cache-key"];
  if (url === undefined && key === undefined) return undefined;
  if (!url || !key)
    throw new CliError(`--cache and --cache-key go together; give both or neither\n\n${help}`, 2);
  const problem = agentFlagProblem("--cache", url, "url") ?? agentFlagProblem("--cache-key", key, "key");
  if (problem) throw new CliError(problem, 2);
  const timeoutMs =
    parsePositiveInt("--cache-timeout", flags["cache-timeout"], defaultCacheTimeoutMs / 1000) * 1000;
  return { url, key, timeoutMs };
}

function resultLine(r: Awaited<ReturnType<typeof download>> | CachedDownloadResult): string {
  if ("uploaded" in r) {
    const { uploaded, ...downloaded } = r;
    return `${resultLine(downloaded)}; stored in the node cache as entry ${uploaded.key}`;
  }
  switch (r.state) {
    case "FromNodeCache":
      return `the node cache holds entry ${r.manifest.key}: ${r.manifest.files.length} file(s), ${formatBytes(r.manifest.size)}, 0 bytes from the origin`;
    case "AlreadyComplete":
      return `already complete: ${r.dest} (sha256 ${r.marker.sha256})`;
    case "Downloaded":
      return `downloaded ${r.marker.files} file(s), ${formatBytes(r.marker.bytes)} into ${r.dest} (sha256 ${r.marker.sha256})`;
    case "VerifiedInPlace":
      return `verified in place: ${r.path} (sha256 ${r.sha256})`;
  }
}
