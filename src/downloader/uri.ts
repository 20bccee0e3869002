// Parses a model URI into the store it names. Every rejection names the value and a right form.
import { credentialNames } from "./contract.ts";
import { DownloadError } from "./errors.ts";
import { redactUri, userinfoPattern } from "./redact.ts";

export type ModelLocation =
  | { scheme: "http"; url: URL }
  | { scheme: "s3"; bucket: string; key: string }
  | { scheme: "gs"; bucket: string; key: string }
  | { scheme: "azure"; account: string; container: string; prefix: string; endpoint?: string }
  | { scheme: "hf"; repo: string; revision: string; path: string }
  | { scheme: "pvc"; claim: string; path: string };

export const uriForms = [
  "https://host/path/file (or http://)",
  "s3://bucket/key-or-prefix",
  "gs://bucket/object-or-prefix",
  "azblob://account/container/prefix or https://account.blob.core.windows.net/container/prefix",
  "hf://org/repo[@revision][/path]",
  "pvc://claim/path",
].join(", ");

function invalid(uri: string, why: string): DownloadError {
  return new DownloadError("InvalidArgument", `--uri "${redactUri(uri)}": ${why}`, {
    hint: `expected one of: ${uriForms}`,
  });
}

/** Splits "bucket/rest/of/key" into the first segment and the rest (without leading slash). */
function splitFirst(rest: string): [string, string] {
  const slash = rest.indexOf("/");
  return slash < 0 ? [rest, ""] : [rest.slice(0, slash), rest.slice(slash + 1)];
}

const azureHost = /^([a-z0-9]{3,24})\.blob\.core\.windows\.net$/;

function parseBucketUri(uri: string, scheme: "s3" | "gs", rest: string): ModelLocation {
  const [bucket, key] = splitFirst(rest);
  if (!/^[a-z0-9][a-z0-9._-]{2,254}$/.test(bucket)) {
    throw invalid(
      uri,
      `bucket "${bucket}" is not a valid bucket name (lowercase letters, digits, ".", "-", "_")`,
    );
  }
  return { scheme, bucket, key };
}

function parseAzure(uri: string, account: string, path: string, endpoint?: string): ModelLocation {
  const [container, prefix] = splitFirst(path);
  if (!account) throw invalid(uri, "the storage account is missing");
  if (!/^[a-z0-9](?:[a-z0-9-]{1,61}[a-z0-9])?$/.test(container)) {
    throw invalid(uri, `container "${container}" is not a valid container name`);
  }
  return endpoint === undefined
    ? { scheme: "azure", account, container, prefix }
    : { scheme: "azure", account, container, prefix, endpoint };
}

function parseHf(uri: string, rest: string): ModelLocation {
  // hf://org/repo[@revision][/path]; a revision may itself contain "/" only if URL-encoded.
  const parts = rest.split("/");
  const org = parts[0] ?? "";
  const repoAndRev = parts[1] ?? "";
  const [name, revision] = repoAndRev.split("@", 2) as [string, string | undefined];
  if (!org || !name) throw invalid(uri, "expected an organisation and a repository");
  if (revision === "") throw invalid(uri, 'the revision after "@" is empty');
  return {
    scheme: "hf",
    repo: `${org}/${name}`,
    revision: revision === undefined ? "main" : decodeURIComponent(revision),
    path: parts.slice(2).join("/"),
  };
}

export function parseModelUri(uri: string): ModelLocation {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/i.exec(uri);
  if (!m) throw invalid(uri, "it has no scheme");
  if (userinfoPattern.test(uri)) {
    throw new DownloadError(
      "InvalidArgument",
      `--uri "${redactUri(uri)}": a user name or password before the host is never sent`,
      {
        hint: `give credentials in the credentials Secret instead (${credentialNames.http.bearerToken} or ${credentialNames.http.headers} for http(s), ${credentialNames.hf.token} for hf://; docs/downloader.md)`,
      },
    );
  }
  const scheme = m[1]!.toLowerCase();
  const rest = m[2]!;
  switch (scheme) {
    case "http":
    case "https": {
      let url: URL;
      try {
        url = new URL(uri);
      } catch {
        throw invalid(uri, "it is not a valid URL");
      }
      const az = azureHost.exec(url.hostname);
      if (az && scheme === "https") return parseAzure(uri, az[1]!, url.pathname.replace(/^\//, ""));
      return { scheme: "http", url };
    }
    case "s3":
    case "gs":
      return parseBucketUri(uri, scheme, rest);
    case "azblob": {
      const [account, path] = splitFirst(rest);
      return parseAzure(uri, account, path);
    }
    case "hf":
      return parseHf(uri, rest);
    case "pvc": {
      const [claim, path] = splitFirst(rest);
      if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(claim)) {
        throw invalid(uri, `claim "${claim}" is not a valid PersistentVolumeClaim name`);
      }
      if (path.split("/").includes("..")) throw invalid(uri, 'the path may not contain ".."');
      return { scheme: "pvc", claim, path };
    }
    default:
      throw invalid(uri, `scheme "${scheme}" is not supported`);
  }
}
