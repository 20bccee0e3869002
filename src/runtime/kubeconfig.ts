/**
 * Where the API server is and who we are to it, without @kubernetes/client-node.
 *
 * Importing client-node costs an idle process about 85 MiB of resident memory and 0.7 s (it
 * pulls in 868 modules: every API group's models, OIDC, WebSockets, tar...), for what a
 * controller needs from it at run time: a kubeconfig read once and a header per request. This
 * module reads kubeconfig files (JSON with JSON.parse; YAML with the `yaml` package, loaded
 * only when a YAML file is read: about 2 MiB of an idle operator) and the in-cluster service
 * account (which never loads `yaml`), and authenticates with what they name:
 *
 *   token, token-file (re-read every minute, as client-go does), client-certificate(-data) and
 *   client-key(-data), username/password (basic), exec plugins (client.authentication.k8s.io
 *   ExecCredential, v1 and v1beta1: a token and/or a client certificate, cached until it
 *   expires), and in-cluster (KUBERNETES_SERVICE_HOST/PORT and the mounted service account).
 *
 * `auth-provider` users (the legacy oidc, gcp and azure plugins) are handed to client-node,
 * imported on their first request only. `proxy-url` is refused with a clear error: the
 * runtime's transport connects directly.
 */
import type { RequestOptions } from "node:https";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { delimiter, dirname, isAbsolute, join } from "node:path";
import type { Connection } from "./client.ts";
import type { TlsSettings } from "./transport.ts";

// node:fs through getBuiltinModule, not `import`: an ES import of a built-in reads every
// export, and fs.promises is a getter that loads fs/promises, readline and more (see
// src/runtime/server.ts). node:child_process is loaded only when an
// exec plugin runs.
const { readFileSync, statSync } = process.getBuiltinModule("node:fs");

export interface KubeConfigCluster {
  server: string;
  "certificate-authority"?: string;
  "certificate-authority-data"?: string;
  "insecure-skip-tls-verify"?: boolean;
  "tls-server-name"?: string;
  "proxy-url"?: string;
}

export interface ExecConfig {
  command: string;
  args?: string[];
  env?: { name: string; value: string }[] | null;
  apiVersion?: string;
  provideClusterInfo?: boolean;
  interactiveMode?: string;
}

export interface KubeConfigUser {
  token?: string;
  "token-file"?: string;
  "client-certificate"?: string;
  "client-certificate-data"?: string;
  "client-key"?: string;
  "client-key-data"?: string;
  username?: string;
  password?: string;
  as?: string;
  "as-groups"?: string[];
  exec?: ExecConfig;
  "auth-provider"?: { name: string; config?: Record<string, string> };
}

/** One context of a kubeconfig, resolved: file paths made absolute against the file's directory. */
export interface KubeContext {
  /** The file the context came from, or "in-cluster". */
  source: string;
  context: string;
  clusterName: string;
  cluster: KubeConfigCluster;
  userName: string;
  user: KubeConfigUser;
  namespace?: string;
}

export interface LoadOptions {
  /** A kubeconfig file; default: $KUBECONFIG (files joined by ":"), ~/.kube/config, in-cluster. */
  path?: string;
  /** A context other than the file's current-context. */
  context?: string;
  /** For tests: the environment and the service-account directory of in-cluster config. */
  env?: NodeJS.ProcessEnv;
  serviceAccountDir?: string;
}

export const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";

/** A kubeconfig that cannot be used, with the reason naming the field. */
export class KubeConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "KubeConfigError";
  }
}

interface NamedEntries<T> {
  name?: string;
  [key: string]: unknown;
  value?: T;
}

interface KubeConfigFile {
  "current-context"?: string;
  clusters?: NamedEntries<KubeConfigCluster>[];
  users?: NamedEntries<KubeConfigUser>[];
  contexts?: NamedEntries<{ cluster: string; user?: string; namespace?: string }>[];
}

/** Loads the current (or the given) context: from `path`, else $KUBECONFIG, ~/.kube/config, in-cluster. */
export function loadKubeConfig(opts: LoadOptions = {}): KubeContext {
  const env = opts.env ?? process.env;
  if (opts.path) return fromFiles([opts.path], opts.context);
  const fromEnv = (env["KUBECONFIG"] ?? "").split(delimiter).filter(Boolean);
  if (fromEnv.length) return fromFiles(fromEnv, opts.context);
  const home = env["HOME"] ?? homedir();
  const config = home ? join(home, ".kube", "config") : undefined;
  if (config && exists(config)) return fromFiles([config], opts.context);
  const dir = opts.serviceAccountDir ?? serviceAccountDir;
  if (env["KUBERNETES_SERVICE_HOST"] && exists(join(dir, "token"))) return inCluster(env, dir);
  throw new KubeConfigError(
    "no kubeconfig found: set KUBECONFIG or pass a kubeconfig file, create ~/.kube/config, or run in a pod with a service account",
  );
}

/** The pod's own service account: the `kubernetes` Service's address and the mounted token and CA. */
export function inCluster(env: NodeJS.ProcessEnv = process.env, dir = serviceAccountDir): KubeContext {
  const host = env["KUBERNETES_SERVICE_HOST"];
  const port = env["KUBERNETES_SERVICE_PORT"];
  if (!host || !port) {
    throw new KubeConfigError(
      "in-cluster config needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT (set in every pod)",
    );
  }
  const bracketed = host.includes(":") ? `[${host}]` : host;
  const namespaceFile = join(dir, "namespace");
  return {
    source: "in-cluster",
    context: "in-cluster",
    clusterName: "in-cluster",
    cluster: { server: `https://${bracketed}:${port}`, "certificate-authority": join(dir, "ca.crt") },
    userName: "in-cluster",
    user: { "token-file": join(dir, "token") },
    ...(exists(namespaceFile) ? { namespace: readFileSync(namespaceFile, "utf8").trim() } : {}),
  };
}

function exists(path: string): boolean {
  try {
    statSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * A kubeconfig's text as a value. YAML is a superset of JSON, so a JSON kubeconfig (`kubectl
 * config view --raw -o json`, or one a program wrote) is read with JSON.parse and `yaml` is
 * not loaded; any other text, or JSON.parse failing on text that starts with `{` (a YAML flow
 * mapping), goes to `yaml`, loaded here on first use, not at import.
 */
function parseKubeConfigText(text: string): unknown {
  if (text.trimStart().startsWith("{")) {
    try {
      return JSON.parse(text);
    } catch {
      // Not JSON: YAML below decides, and reports the error if it is not YAML either.
    }
  }
  const { parse } = createRequire(import.meta.url)("yaml") as typeof import("yaml");
  return parse(text);
}

/** Parses a kubeconfig file (JSON or YAML). */
function parseFile(path: string): KubeConfigFile {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    throw new KubeConfigError(`cannot read kubeconfig ${path}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = parseKubeConfigText(text);
  } catch (err) {
    throw new KubeConfigError(`kubeconfig ${path} is not valid YAML: ${(err as Error).message}`);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
    throw new KubeConfigError(`kubeconfig ${path} is not a mapping (apiVersion: v1, kind: Config)`);
  return parsed as KubeConfigFile;
}

/** Relative file paths in a kubeconfig are relative to the file's directory (as kubectl reads them). */
function absolute(base: string, path: string | undefined): string | undefined {
  return path === undefined || path === "" || isAbsolute(path) ? path : join(base, path);
}

interface Found<T> {
  value: T;
  dir: string;
  file: string;
}

/** Merges files the way kubectl does: for each name, and for current-context, the first file that sets it wins. */
function fromFiles(paths: string[], context: string | undefined): KubeContext {
  const clusters = new Map<string, Found<KubeConfigCluster>>();
  const users = new Map<string, Found<KubeConfigUser>>();
  const contexts = new Map<string, Found<{ cluster: string; user?: string; namespace?: string }>>();
  let current: string | undefined;
  for (const file of paths) {
    const cfg = parseFile(file);
    const dir = dirname(file);
    current ??= cfg["current-context"] || undefined;
    const collect = <T>(list: NamedEntries<T>[] | undefined, field: string, into: Map<string, Found<T>>) => {
      for (const [i, entry] of (list ?? []).entries()) {
        if (!entry?.name) throw new KubeConfigError(`kubeconfig ${file}: ${field}s[${i}].name is missing`);
        const value = entry[field] as T | undefined;
        if (value === undefined || value === null)
          throw new KubeConfigError(`kubeconfig ${file}: ${field}s[${i}] ("${entry.name}") has no ${field}`);
        if (!into.has(entry.name)) into.set(entry.name, { value, dir, file });
      }
    };
    collect(cfg.clusters, "cluster", clusters);
    collect(cfg.users, "user", users);
    collect(cfg.contexts, "context", contexts);
  }
  const where = paths.join(delimiter);
  const name = context ?? current;
  if (!name) throw new KubeConfigError(`kubeconfig ${where} has no current-context (and none was asked for)`);
  const ctx = contexts.get(name);
  if (!ctx) throw new KubeConfigError(`kubeconfig ${where} has no context "${name}"`);
  const cluster = clusters.get(ctx.value.cluster);
  if (!cluster)
    throw new KubeConfigError(
      `kubeconfig ${where}: context "${name}" names cluster "${ctx.value.cluster}", which is not defined`,
    );
  if (!cluster.value.server)
    throw new KubeConfigError(`kubeconfig ${cluster.file}: cluster "${ctx.value.cluster}" has no server`);
  const userName = ctx.value.user ?? "";
  const user = userName ? users.get(userName) : undefined;
  if (userName && !user)
    throw new KubeConfigError(
      `kubeconfig ${where}: context "${name}" names user "${userName}", which is not defined`,
    );
  const u = user?.value ?? {};
  const ud = user?.dir ?? "";
  const c = cluster.value;
  const resolvedUser: KubeConfigUser = {
    ...u,
    ...(u["token-file"] ? { "token-file": absolute(ud, u["token-file"]) } : {}),
    ...(u["client-certificate"] ? { "client-certificate": absolute(ud, u["client-certificate"]) } : {}),
    ...(u["client-key"] ? { "client-key": absolute(ud, u["client-key"]) } : {}),
    // A relative command with a path in it is relative to the kubeconfig, a bare name is looked up on PATH.
    ...(u.exec?.command?.includes("/")
      ? { exec: { ...u.exec, command: absolute(ud, u.exec.command)! } }
      : {}),
  };
  return {
    source: where,
    context: name,
    clusterName: ctx.value.cluster,
    cluster: {
      ...c,
      server: c.server.replace(/\/+$/, ""),
      ...(c["certificate-authority"]
        ? { "certificate-authority": absolute(cluster.dir, c["certificate-authority"]) }
        : {}),
    },
    userName,
    user: resolvedUser,
    ...(ctx.value.namespace ? { namespace: ctx.value.namespace } : {}),
  };
}

/** Bytes of a `*-data` field (base64) or of a file; undefined when neither is set. */
function material(ctx: KubeContext, file: string | undefined, data: string | undefined, field: string) {
  if (data) return Buffer.from(data, "base64");
  if (!file) return undefined;
  try {
    return readFileSync(file);
  } catch (err) {
    throw new KubeConfigError(
      `${field} ${file} (kubeconfig ${ctx.source}) cannot be read: ${(err as Error).message}`,
    );
  }
}

/** The TLS settings a context names (CA, client certificate, verification, SNI). */
export function tlsOf(ctx: KubeContext): TlsSettings {
  const { cluster: c, user: u } = ctx;
  const tls: TlsSettings = {};
  const ca = material(
    ctx,
    c["certificate-authority"],
    c["certificate-authority-data"],
    "certificate-authority",
  );
  if (ca) tls.ca = ca;
  const cert = material(ctx, u["client-certificate"], u["client-certificate-data"], "client-certificate");
  const key = material(ctx, u["client-key"], u["client-key-data"], "client-key");
  if (Boolean(cert) !== Boolean(key))
    throw new KubeConfigError(
      `user "${ctx.userName}" (kubeconfig ${ctx.source}) has a client ${cert ? "certificate without a key" : "key without a certificate"}: set both client-certificate(-data) and client-key(-data)`,
    );
  if (cert && key) Object.assign(tls, { cert, key });
  if (c["insecure-skip-tls-verify"]) tls.rejectUnauthorized = false;
  if (c["tls-server-name"]) tls.servername = c["tls-server-name"];
  return tls;
}

/** client-go re-reads a token file at most this often (tokens of projected volumes rotate). */
export const tokenFileRefreshMs = 60_000;

/** Reads a token file again once it is older than `refreshMs`. */
function tokenFileReader(path: string, refreshMs: number, now: () => number): () => string {
  let token = "";
  let readAt = Number.NEGATIVE_INFINITY;
  return () => {
    if (now() - readAt >= refreshMs) {
      try {
        token = readFileSync(path, "utf8").trim();
      } catch (err) {
        // Keep a token we have (the file is being swapped); fail only if there never was one.
        if (!token) throw new KubeConfigError(`token-file ${path} cannot be read: ${(err as Error).message}`);
      }
      readAt = now();
    }
    return token;
  };
}

/** The status of an ExecCredential an exec plugin printed. */
export interface ExecCredentialStatus {
  token?: string;
  clientCertificateData?: string;
  clientKeyData?: string;
  expirationTimestamp?: string;
}

const execApiVersions = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"];

/** Runs an exec plugin once and returns the credential it printed, or why it failed. */
export function runExecPlugin(ctx: KubeContext, exec: ExecConfig): Promise<ExecCredentialStatus> {
  const apiVersion = exec.apiVersion ?? "";
  const name = `exec plugin "${exec.command}" of user "${ctx.userName}" (kubeconfig ${ctx.source})`;
  if (!execApiVersions.includes(apiVersion))
    return Promise.reject(
      new KubeConfigError(
        `${name}: exec.apiVersion "${apiVersion}" is not one of ${execApiVersions.join(", ")}`,
      ),
    );
  // The plugin learns it is not interactive (a controller has no terminal) and, if it asks, the cluster.
  const info = {
    apiVersion,
    kind: "ExecCredential",
    spec: {
      interactive: false,
      ...(exec.provideClusterInfo
        ? {
            cluster: {
              server: ctx.cluster.server,
              ...(ctx.cluster["tls-server-name"]
                ? { "tls-server-name": ctx.cluster["tls-server-name"] }
                : {}),
              ...(ctx.cluster["certificate-authority-data"]
                ? { "certificate-authority-data": ctx.cluster["certificate-authority-data"] }
                : {}),
              ...(ctx.cluster["insecure-skip-tls-verify"] ? { "insecure-skip-tls-verify": true } : {}),
            },
          }
        : {}),
    },
  };
  const env: NodeJS.ProcessEnv = { ...process.env, KUBERNETES_EXEC_INFO: JSON.stringify(info) };
  for (const e of exec.env ?? []) env[e.name] = e.value;
  const { spawn } = process.getBuiltinModule("node:child_process");
  return new Promise((resolve, reject) => {
    const child = spawn(exec.command, exec.args ?? [], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
    });
    child.stderr.setEncoding("utf8").on("data", (d: string) => {
      err += d;
    });
    child.once("error", (e) => reject(new KubeConfigError(`${name} could not run: ${e.message}`)));
    child.once("close", (code) => {
      if (code !== 0) {
        reject(new KubeConfigError(`${name} exited with ${code}: ${err.trim().slice(0, 500)}`));
        return;
      }
      let cred: { apiVersion?: string; kind?: string; status?: ExecCredentialStatus };
      try {
        cred = JSON.parse(out) as typeof cred;
      } catch {
        reject(new KubeConfigError(`${name} printed no ExecCredential JSON: ${out.trim().slice(0, 200)}`));
        return;
      }
      if (cred.kind !== "ExecCredential" || cred.apiVersion !== apiVersion) {
        reject(
          new KubeConfigError(
            `${name} printed kind "${cred.kind}" apiVersion "${cred.apiVersion}"; want ExecCredential ${apiVersion}`,
          ),
        );
        return;
      }
      const status = cred.status ?? {};
      if (!status.token && !(status.clientCertificateData && status.clientKeyData)) {
        reject(new KubeConfigError(`${name} returned neither status.token nor a client certificate and key`));
        return;
      }
      resolve(status);
    });
  });
}

/** Caches a plugin's credential until its expirationTimestamp; one run at a time. */
function execCredentials(
  ctx: KubeContext,
  exec: ExecConfig,
  now: () => number,
  run: typeof runExecPlugin,
): () => Promise<ExecCredentialStatus> {
  let cached: { status: ExecCredentialStatus; expires: number } | undefined;
  let running: Promise<ExecCredentialStatus> | undefined;
  return async () => {
    if (cached && now() < cached.expires) return cached.status;
    running ??= run(ctx, exec)
      .then((status) => {
        const at = status.expirationTimestamp
          ? Date.parse(status.expirationTimestamp)
          : Number.POSITIVE_INFINITY;
        cached = { status, expires: Number.isNaN(at) ? Number.POSITIVE_INFINITY : at };
        return status;
      })
      .finally(() => {
        running = undefined;
      });
    return running;
  };
}

/** Headers from client-node for an auth-provider user (oidc, gcp, azure); client-node is imported now. */
function authProviderHeaders(ctx: KubeContext): () => Promise<Record<string, string>> {
  let kc: Promise<import("@kubernetes/client-node").KubeConfig> | undefined;
  return async () => {
    kc ??= import("@kubernetes/client-node").then(({ KubeConfig }) => {
      const k = new KubeConfig();
      k.loadFromOptions({
        clusters: [{ name: ctx.clusterName, server: ctx.cluster.server, skipTLSVerify: false }],
        users: [{ name: ctx.userName, authProvider: ctx.user["auth-provider"] }],
        contexts: [{ name: ctx.context, cluster: ctx.clusterName, user: ctx.userName }],
        currentContext: ctx.context,
      });
      return k;
    });
    const opts: RequestOptions = {};
    await (await kc).applyToHTTPSOptions(opts);
    return Object.fromEntries(Object.entries(opts.headers ?? {}).map(([k, v]) => [k, String(v)]));
  };
}

export interface ConnectionOptions {
  /** For tests: the clock of token-file refreshes and exec credential expiry. */
  now?: () => number;
  /** For tests: how an exec plugin is run. */
  runExec?: typeof runExecPlugin;
}

/** A Connection for KubeClient that authenticates as the context's user. */
export function kubeConnection(ctx: KubeContext, opts: ConnectionOptions = {}): Connection {
  const { cluster: c, user: u } = ctx;
  if (c["proxy-url"])
    throw new KubeConfigError(
      `cluster "${ctx.clusterName}" (kubeconfig ${ctx.source}) sets proxy-url ${c["proxy-url"]}; the runtime connects to the API server directly: remove proxy-url or give a directly reachable server`,
    );
  if (u["as-groups"]?.length)
    throw new KubeConfigError(
      `user "${ctx.userName}" (kubeconfig ${ctx.source}) sets as-groups, which the runtime does not send; impersonate a user with "as" only`,
    );
  const now = opts.now ?? Date.now;
  const staticTls = tlsOf(ctx);
  const fixed: Record<string, string> = {};
  if (u.as) fixed["Impersonate-User"] = u.as;
  if (u.username !== undefined || u.password !== undefined)
    fixed["Authorization"] =
      `Basic ${Buffer.from(`${u.username ?? ""}:${u.password ?? ""}`).toString("base64")}`;
  if (u.token) fixed["Authorization"] = `Bearer ${u.token}`;

  const tokenFile = u["token-file"];
  const readToken = tokenFile && !u.token ? tokenFileReader(tokenFile, tokenFileRefreshMs, now) : undefined;
  const provider = u["auth-provider"] ? authProviderHeaders(ctx) : undefined;
  const exec = u.exec ? execCredentials(ctx, u.exec, now, opts.runExec ?? runExecPlugin) : undefined;
  // A client certificate from an exec plugin joins the static TLS settings; a new certificate
  // (after expiry) is a new object, so the transport opens a new connection pool for it.
  let tls = staticTls;
  let tlsFrom: ExecCredentialStatus | undefined;

  return {
    server: c.server,
    get tls() {
      return tls;
    },
    async headers() {
      const headers = { ...fixed };
      if (readToken) headers["Authorization"] = `Bearer ${readToken()}`;
      if (provider) Object.assign(headers, await provider());
      if (exec) {
        const status = await exec();
        if (status.token) headers["Authorization"] = `Bearer ${status.token}`;
        if (status !== tlsFrom && status.clientCertificateData && status.clientKeyData) {
          tls = { ...staticTls, cert: status.clientCertificateData, key: status.clientKeyData };
          tlsFrom = status;
        }
      }
      return headers;
    },
  };
}
