// The contract between the operator (which builds the download Job) and `mlmodel download`
// (which runs in it). The operator imports these names instead of repeating strings, and
// docs/downloader.md explains each one. Change a value here only together with both sides.

/**
 * The command the Job runs: `mlmodel download --uri URI --dest DIR [--sha256 HEX]`, or with
 * `--uri-from-env MLMODEL_URI` instead of `--uri` when the URI has credentials in it (a
 * pre-signed URL, a SAS, a token): the operator sets that variable from a Secret, so the URI
 * never shows in the Job's args or env values.
 */
export const downloadCommand = ["mlmodel", "download"] as const;
export const modelUriEnv = "MLMODEL_URI";

/**
 * Where the operator mounts the user's credentials Secret (as a volume, one file per key).
 * Every credential below is read from the environment first and, when unset there, from the
 * file of the same name in this directory, so the operator may map a Secret either way
 * (`envFrom: secretRef` or a volume) and users may name their keys after the env vars.
 */
export const credentialsDirEnv = "MLMODEL_CREDENTIALS_DIR";
export const defaultCredentialsDir = "/var/run/secrets/mlmodel/credentials";

/** The Secret's name, only used to make failure messages actionable ("check Secret x"). */
export const credentialsSecretNameEnv = "MLMODEL_CREDENTIALS_SECRET";

/**
 * A PEM bundle of extra CA certificates trusted for every scheme (added to the system roots):
 * env MLMODEL_CA_BUNDLE = a path, or the key `ca.crt` in the credentials directory.
 */
export const caBundleEnv = "MLMODEL_CA_BUNDLE";
export const caBundleFile = "ca.crt";

/** Credential names per scheme. Each is an env var name and, equally, a file name in the dir. */
export const credentialNames = {
  http: {
    /** Sent as `Authorization: Bearer <token>`. */
    bearerToken: "MLMODEL_HTTP_BEARER_TOKEN",
    /** Extra request headers, one `Name: value` per line (e.g. an API key header). */
    headers: "MLMODEL_HTTP_HEADERS",
  },
  s3: {
    accessKeyId: "AWS_ACCESS_KEY_ID",
    secretAccessKey: "AWS_SECRET_ACCESS_KEY",
    sessionToken: "AWS_SESSION_TOKEN",
    /** Region; AWS_DEFAULT_REGION is accepted too. Default us-east-1. */
    region: "AWS_REGION",
    /** Any S3-compatible endpoint, e.g. https://minio.example:9000. AWS_ENDPOINT_URL too. */
    endpoint: "AWS_ENDPOINT_URL_S3",
    /** "true" for path-style addressing (most S3-compatible servers need it). */
    forcePathStyle: "MLMODEL_S3_FORCE_PATH_STYLE",
    // Without keys, the AWS SDK's default chain applies: web identity (AWS_ROLE_ARN +
    // AWS_WEB_IDENTITY_TOKEN_FILE, as EKS IRSA sets them), container and instance metadata.
  },
  gs: {
    /** A path to a service-account JSON key (standard Google env var). */
    applicationCredentials: "GOOGLE_APPLICATION_CREDENTIALS",
    /** The same JSON as a key in the credentials directory. Absent both: anonymous. */
    serviceAccountFile: "service-account.json",
    /** host:port or URL of a GCS-compatible server (standard name used by Google's SDKs). */
    emulatorHost: "STORAGE_EMULATOR_HOST",
  },
  azure: {
    connectionString: "AZURE_STORAGE_CONNECTION_STRING",
    /** A SAS token (with or without the leading "?") for the account in the URI. */
    sasToken: "AZURE_STORAGE_SAS_TOKEN",
    /** Overrides https://<account>.blob.core.windows.net (e.g. an emulator or sovereign cloud). */
    blobEndpoint: "AZURE_STORAGE_BLOB_ENDPOINT",
  },
  hf: {
    token: "HF_TOKEN",
    /** The hub's base URL, default https://huggingface.co (a mirror or a local server). */
    endpoint: "HF_ENDPOINT",
  },
} as const;

/** Where the operator mounts `pvc://claim/...` claims: <root>/<claim>. Nothing is copied. */
export const pvcRootEnv = "MLMODEL_PVC_ROOT";
export const defaultPvcRoot = "/mnt/pvc";

/**
 * Written inside DEST as the last step of an atomic publish (it is in the temporary directory
 * before the rename, so DEST either does not exist or is complete with its marker).
 * Content: JSON of {@link CompletionMarker}. A re-run with the same URI (and sha256, if given)
 * that finds it exits 0 at once.
 */
export const completionMarkerName = ".mlmodel-complete.json";

export interface CompletionMarker {
  /** Format of this file; bumped on incompatible change. */
  version: 1;
  /** The URI as shown: credentials in it redacted (the serving pods can read this file). */
  uri: string;
  /**
   * sha256 of the exact URI, lowercase hex: what a re-run compares. Absent in markers written
   * before URIs were redacted, whose `uri` is the exact URI.
   */
  uriSha256?: string;
  /** sha256 of the content (see docs/downloader.md, "Digest"), lowercase hex. */
  sha256: string;
  /** How sha256 was computed: of the single downloaded object or of the tree manifest. */
  digestOf: "file" | "tree";
  files: number;
  bytes: number;
  /** True when a .tar.gz/.tgz/.zip was unpacked into DEST. */
  extracted: boolean;
  completedAt: string;
}

/** The temporary directory, a sibling of DEST (same filesystem, so the publish is a rename). */
export function partialDirFor(dest: string): string {
  const trimmed = dest.replace(/\/+$/, "");
  const slash = trimmed.lastIndexOf("/");
  return `${trimmed.slice(0, slash + 1)}.${trimmed.slice(slash + 1)}.mlmodel-partial`;
}

/**
 * Exit codes. Both non-zero codes are final verdicts (a rerun with the same args and
 * credentials fails the same way), so the operator's Job fails at once on either
 * (podFailurePolicy FailJob) instead of retrying pods; other exits (137 OOM kill, eviction)
 * are retried up to the Job's backoffLimit.
 */
export const exitCodes = {
  /** DEST is complete (or pvc:// content verified in place). */
  ok: 0,
  /** The download failed; the termination log says why (one line, below). */
  failed: 1,
  /** Bad flags (usage): the Job's args are wrong, also written to the termination log. */
  usage: 2,
} as const;

/**
 * On failure the downloader writes ONE line to this file (Kubernetes' terminationMessagePath)
 * and the same line to stderr, then exits 1 (2 for bad flags). The operator copies it into the MLModel's
 * condition message. Format: `<uri>: <Reason>: <what to check>`, for example
 * `s3://models/resnet: AccessDenied: check the keys in Secret model-creds`. The URI is shown
 * redacted (redact.ts), here as in every line the downloader prints and every status field.
 * Reason is one CamelCase word from {@link FailureReason}.
 */
export const terminationLogPath = "/dev/termination-log";
export const terminationLogEnv = "MLMODEL_TERMINATION_LOG";

export const failureReasons = [
  "InvalidArgument",
  "AccessDenied",
  "NotFound",
  "ChecksumMismatch",
  "UnsafeArchive",
  "TooLarge",
  "TLSError",
  "NetworkError",
  "ServerError",
  "Internal",
] as const;
export type FailureReason = (typeof failureReasons)[number];

/**
 * Progress: when both MLMODEL_NAME and MLMODEL_NAMESPACE are set, the pod server-side-applies
 * `status.download` of that MLModel (status subresource, field manager "mlmodel-downloader",
 * force) at most every {@link progressIntervalMs}, and once at the end. Its RBAC needs only
 * `patch` on `mlmodels/status` for that one resourceName. Without the env vars, progress goes
 * to stderr only (one line per interval). A failing status patch never fails the download.
 */
export const modelNameEnv = "MLMODEL_NAME";
export const modelNamespaceEnv = "MLMODEL_NAMESPACE";
export const progressFieldManager = "mlmodel-downloader";
export const progressIntervalMs = 2000;
export const mlmodelResource = {
  group: "serving.mlmodel.dev",
  version: "v1alpha1",
  kind: "MLModel",
  plural: "mlmodels",
} as const;

/**
 * The ServiceAccount the operator gives the download Job (one per model, named by the
 * operator's childNames.downloader): its Role allows only `patch` on `mlmodels/status` with
 * `resourceNames: [<model>]`, so the token in the pod can touch this model's status only.
 */
export const downloaderRoleRule = (model: string) => ({
  apiGroups: [mlmodelResource.group],
  resources: [`${mlmodelResource.plural}/status`],
  resourceNames: [model],
  verbs: ["patch"],
});

/** The fields this downloader owns under status.download (the CRD schema must allow them). */
export interface DownloadStatus {
  phase: "Downloading" | "Verifying" | "Extracting" | "Complete" | "Failed";
  bytesDone: number;
  /** Absent while unknown (e.g. an HTTP server that sends no Content-Length). */
  bytesTotal?: number;
  bytesPerSecond: number;
  filesDone: number;
  filesTotal?: number;
  startedAt: string;
  updatedAt: string;
  finishedAt?: string;
  /** The termination-log line when phase is Failed. */
  message?: string;
  /**
   * One short human line, the `Download` column of `kubectl get mlm`:
   * "34% 412Mi/1.2Gi 56Mi/s", "412Mi 56Mi/s" (size unknown), "verifying 1.2Gi", "100% 1.2Gi",
   * "failed at 34% 412Mi/1.2Gi". See progressText in progress.ts.
   */
  progress: string;
}

/**
 * Every field of {@link DownloadStatus}: the downloader's share of status.download. The operator
 * never sends them (it would take their ownership) and clears them when it starts a new Job, so
 * progress shown is always that of the current download.
 */
export const downloaderStatusFields = [
  "phase",
  "bytesDone",
  "bytesTotal",
  "bytesPerSecond",
  "filesDone",
  "filesTotal",
  "startedAt",
  "updatedAt",
  "finishedAt",
  "message",
  "progress",
] as const satisfies readonly (keyof DownloadStatus)[];
