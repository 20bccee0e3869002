// Picks the store for a parsed URI. Each SDK is imported only when its scheme is used, so a
// Job downloading over https never loads the AWS or Azure SDKs.
import type { Credentials } from "../credentials.ts";
import type { ModelLocation } from "../uri.ts";
import type { Source } from "./source.ts";

export async function createSource(
  loc: Exclude<ModelLocation, { scheme: "pvc" }>,
  creds: Credentials,
): Promise<Source> {
  switch (loc.scheme) {
    case "http":
      return new (await import("./http.ts")).HttpSource(loc.url, creds);
    case "s3":
      return new (await import("./s3.ts")).S3Source(loc, creds);
    case "gs":
      return new (await import("./gcs.ts")).GcsSource(loc, creds);
    case "azure":
      return new (await import("./azure.ts")).AzureSource(loc, creds);
    case "hf":
      return new (await import("./hf.ts")).HfSource(loc, creds);
  }
}
