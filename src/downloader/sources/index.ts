// Picks the store for a parsed URI. Each SDK is imported only when its scheme is used, so a
// Job downloading over https never loads the AWS or Azure SDKs.
import type { Credentials } from "../credentials.ts";
import type { ModelLocation } from "../uri.ts";
import type { Source, SourceLimits } from "./source.ts";

export async function createSource(
  loc: Exclude<ModelLocation, { scheme: "pvc" }>,
  creds: Credentials,
  limits: SourceLimits,
): Promise<Source> {
  switch (loc.scheme) {
    case "http":
      return new (await import("./http.ts")).HttpSource(loc.url, creds, limits);
    case "s3":
      return new (await import("./s3.ts")).S3Source(loc, creds, limits);
    case "gs":
      return new (await import("./gcs.ts")).GcsSource(loc, creds, limits);
    case "azure":
      return new (await import("./azure.ts")).AzureSource(loc, creds, limits);
    case "hf":
      return new (await import("./hf.ts")).HfSource(loc, creds, limits);
  }
}
