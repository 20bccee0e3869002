import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { stringify } from "yaml";
import {
  type ExecCredentialStatus,
  KubeConfigError,
  type KubeContext,
  kubeConnection,
  loadKubeConfig,
  runExecPlugin,
  tlsOf,
} from "../../../src/runtime/index.ts";
import { scratchDir } from "../../harness/scratch.ts";

const dir = scratchDir("kubeconfig-unit");
let n = 0;

function file(config: object, where = dir): string {
  const path = join(where, `config-${n++}`);
  writeFileSync(path, stringify(config));
  return path;
}

function config(user: object, cluster: object = {}, extra: object = {}) {
  return {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "c", cluster: { server: "https://127.0.0.1:6443/", ...cluster } }],
    users: [{ name: "u", user }],
    contexts: [{ name: "x", context: { cluster: "c", user: "u", namespace: "models" } }],
    "current-context": "x",
    ...extra,
  };
}

const b64 = (s: string) => Buffer.from(s).toString("base64");

describe("loading a kubeconfig", () => {
  it("resolves the current context, trims the server's trailing slash and keeps the namespace", () => {
    const ctx = loadKubeConfig({ path: file(config({ token: "t" })) });
    assert.equal(ctx.cluster.server, "https://127.0.0.1:6443");
    assert.equal(ctx.namespace, "models");
    assert.equal(ctx.context, "x");
    assert.equal(ctx.user.token, "t");
  });

  it("makes file paths relative to the kubeconfig's directory; a bare exec command stays on PATH", () => {
    const sub = join(dir, "sub");
    mkdirSync(sub, { recursive: true });
    const ctx = loadKubeConfig({
      path: file(
        config(
          {
            "client-certificate": "c.crt",
            "client-key": "/abs/c.key",
            "token-file": "t",
            exec: { command: "./p" },
          },
          { "certificate-authority": "ca.crt" },
        ),
        sub,
      ),
    });
    assert.equal(ctx.cluster["certificate-authority"], join(sub, "ca.crt"));
    assert.equal(ctx.user["client-certificate"], join(sub, "c.crt"));
    assert.equal(ctx.user["client-key"], "/abs/c.key");
    assert.equal(ctx.user["token-file"], join(sub, "t"));
    assert.equal(ctx.user.exec?.command, join(sub, "p"));
    const bare = loadKubeConfig({ path: file(config({ exec: { command: "gke-auth" } })) });
    assert.equal(bare.user.exec?.command, "gke-auth");
  });

  it("merges $KUBECONFIG files as kubectl does: the first file to name something wins", () => {
    const first = file({
      "current-context": "a",
      contexts: [{ name: "a", context: { cluster: "c", user: "u" } }],
      users: [{ name: "u", user: { token: "first" } }],
    });
    const second = file(config({ token: "second" }, {}, { "current-context": "x" }));
    const ctx = loadKubeConfig({ env: { KUBECONFIG: `${first}:${second}` } });
    assert.equal(ctx.context, "a");
    assert.equal(ctx.user.token, "first");
    assert.equal(ctx.cluster.server, "https://127.0.0.1:6443", "the cluster only the second file defines");
    assert.equal(loadKubeConfig({ env: { KUBECONFIG: `${first}:${second}` }, context: "x" }).context, "x");
  });

  it("says which field is wrong", () => {
    const bad = (cfg: object, pattern: RegExp, context?: string) =>
      assert.throws(
        () => loadKubeConfig({ path: file(cfg), ...(context ? { context } : {}) }),
        (e: unknown) => e instanceof KubeConfigError && pattern.test(e.message),
      );
    bad(config({}), /has no context "nope"/, "nope");
    bad({ ...config({}), "current-context": "" }, /has no current-context/);
    bad(
      { ...config({}), contexts: [{ name: "x", context: { cluster: "other" } }] },
      /names cluster "other", which is not defined/,
    );
    bad({ ...config({}), clusters: [{ name: "c" }] }, /clusters\[0\] \("c"\) has no cluster/);
    bad({ ...config({}), users: [{ user: {} }] }, /users\[0\]\.name is missing/);
    assert.throws(() => loadKubeConfig({ path: join(dir, "absent") }), /cannot read kubeconfig .*absent/);
    writeFileSync(join(dir, "list"), "- a\n- b\n");
    assert.throws(() => loadKubeConfig({ path: join(dir, "list") }), /is not a mapping/);
  });

  it("falls back to ~/.kube/config, then in-cluster, and says what to do when there is neither", () => {
    const home = scratchDir("home");
    const noConfig = { HOME: home };
    assert.throws(
      () => loadKubeConfig({ env: noConfig, serviceAccountDir: home }),
      /no kubeconfig found: set KUBECONFIG/,
    );
    const sa = scratchDir("sa");
    writeFileSync(join(sa, "token"), "tok\n");
    const inPod = loadKubeConfig({
      env: { ...noConfig, KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443" },
      serviceAccountDir: sa,
    });
    assert.equal(inPod.cluster.server, "https://[fd00::1]:443");
    assert.equal(inPod.user["token-file"], join(sa, "token"));
    assert.equal(inPod.namespace, undefined, "no namespace file: none");
    mkdirSync(join(home, ".kube"));
    writeFileSync(join(home, ".kube", "config"), stringify(config({ token: "home" })));
    assert.equal(loadKubeConfig({ env: noConfig }).user.token, "home");
  });
});

describe("a JSON kubeconfig", () => {
  const json = (cfg: object, text = JSON.stringify(cfg, null, 2)) => {
    const path = join(dir, `config-${n++}.json`);
    writeFileSync(path, `\n  ${text}`);
    return path;
  };

  it("reads as its YAML twin does, and a YAML flow mapping that is not JSON still reads", () => {
    const cfg = config(
      { "client-certificate-data": b64("cert"), "client-key-data": b64("key"), exec: { command: "./p" } },
      { "certificate-authority": "ca.crt", "insecure-skip-tls-verify": true },
    );
    const fromJson = loadKubeConfig({ path: json(cfg) });
    const fromYaml = loadKubeConfig({ path: file(cfg) });
    assert.deepEqual({ ...fromJson, source: "" }, { ...fromYaml, source: "" });
    assert.equal(fromJson.user.exec?.command, join(dir, "p"));
    assert.equal(fromJson.cluster["insecure-skip-tls-verify"], true);
    // `{` opens a YAML flow mapping too: unquoted keys are not JSON, and yaml reads them.
    const flow = json(
      {},
      `{apiVersion: v1, current-context: x, contexts: [{name: x, context: {cluster: c}}], clusters: [{name: c, cluster: {server: "https://h:1"}}]}`,
    );
    assert.equal(loadKubeConfig({ path: flow }).cluster.server, "https://h:1");
    assert.throws(() => loadKubeConfig({ path: json({}, "{ not: [json, nor yaml") }), /is not valid YAML/);
  });

  it("and in-cluster config do not load the yaml package; a YAML file does", () => {
    // In a fresh process: this one imported yaml above.
    const sa = scratchDir("sa-json");
    writeFileSync(join(sa, "token"), "tok\n");
    const script = `
      import { createRequire } from "node:module";
      const { loadKubeConfig } = await import(${JSON.stringify(new URL("../../../src/runtime/index.ts", import.meta.url).href)});
      const yamlLoaded = () => Object.keys(createRequire(import.meta.url).cache).some((f) => f.includes("/node_modules/yaml/"));
      const seen = [];
      const inPod = loadKubeConfig({ env: { HOME: ${JSON.stringify(sa)}, KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBERNETES_SERVICE_PORT: "443" }, serviceAccountDir: ${JSON.stringify(sa)} });
      seen.push([inPod.cluster.server, yamlLoaded()]);
      seen.push([loadKubeConfig({ path: process.argv[1] }).user.token, yamlLoaded()]);
      seen.push([loadKubeConfig({ path: process.argv[2] }).user.token, yamlLoaded()]);
      console.log(JSON.stringify(seen));`;
    const res = spawnSync(
      process.execPath,
      ["--input-type=module", "-e", script, json(config({ token: "j" })), file(config({ token: "y" }))],
      { encoding: "utf8" },
    );
    assert.equal(res.status, 0, res.stderr);
    assert.deepEqual(JSON.parse(res.stdout), [
      ["https://10.0.0.1:443", false],
      ["j", false],
      ["y", true],
    ]);
  });
});

describe("a connection's TLS and headers", () => {
  const ctx = (user: object, cluster: object = {}): KubeContext =>
    loadKubeConfig({ path: file(config(user, cluster)) });

  it("decodes CA and client certificate data, and maps insecure-skip-tls-verify and tls-server-name", () => {
    const tls = tlsOf(
      ctx(
        { "client-certificate-data": b64("CERT"), "client-key-data": b64("KEY") },
        {
          "certificate-authority-data": b64("CA"),
          "insecure-skip-tls-verify": true,
          "tls-server-name": "api",
        },
      ),
    );
    assert.deepEqual(
      { ...tls, ca: String(tls.ca), cert: String(tls.cert), key: String(tls.key) },
      { ca: "CA", cert: "CERT", key: "KEY", rejectUnauthorized: false, servername: "api" },
    );
    assert.throws(
      () => tlsOf(ctx({ "client-certificate-data": b64("CERT") })),
      /client certificate without a key/,
    );
    assert.throws(
      () => tlsOf(ctx({ "client-key": join(dir, "absent.key") })),
      /client-key .*absent\.key .*cannot be read/,
    );
  });

  it("sends a token, basic auth and impersonation as headers; a token wins over a token file", async () => {
    assert.deepEqual(await kubeConnection(ctx({ token: "t", as: "jane" })).headers(), {
      Authorization: "Bearer t",
      "Impersonate-User": "jane",
    });
    assert.deepEqual(await kubeConnection(ctx({ username: "u", password: "p" })).headers(), {
      Authorization: `Basic ${b64("u:p")}`,
    });
    assert.deepEqual(await kubeConnection(ctx({ token: "t", "token-file": join(dir, "absent") })).headers(), {
      Authorization: "Bearer t",
    });
  });

  it("refuses proxy-url and as-groups instead of ignoring them", () => {
    assert.throws(
      () => kubeConnection(ctx({}, { "proxy-url": "http://proxy:3128" })),
      /proxy-url .*connects to the API server directly/,
    );
    assert.throws(() => kubeConnection(ctx({ "as-groups": ["g"] })), /as-groups/);
  });

  it("runs an exec plugin again only once its credential expired, and uses a certificate it returns", async () => {
    let now = Date.parse("2030-01-01T00:00:00Z");
    const issued: ExecCredentialStatus[] = [
      { token: "one", expirationTimestamp: "2030-01-01T00:01:00Z" },
      { token: "two", clientCertificateData: "CERT", clientKeyData: "KEY" },
    ];
    let runs = 0;
    const conn = kubeConnection(
      ctx({ exec: { command: "p", apiVersion: "client.authentication.k8s.io/v1" } }),
      {
        now: () => now,
        runExec: async () => issued[runs++]!,
      },
    );
    const [a, b] = await Promise.all([conn.headers(), conn.headers()]);
    assert.deepEqual([a, b, runs], [{ Authorization: "Bearer one" }, { Authorization: "Bearer one" }, 1]);
    const before = conn.tls;
    assert.equal(before?.cert, undefined);
    now += 60_000;
    assert.deepEqual(await conn.headers(), { Authorization: "Bearer two" });
    assert.equal(runs, 2);
    assert.deepEqual({ cert: conn.tls?.cert, key: conn.tls?.key }, { cert: "CERT", key: "KEY" });
    const pool = conn.tls;
    await conn.headers();
    assert.equal(conn.tls, pool, "the same credential keeps the same TLS object (and connection pool)");
  });
});

describe("exec plugins", () => {
  const plugin = (script: string, apiVersion = "client.authentication.k8s.io/v1") => {
    const path = join(dir, `plugin-${n++}.sh`);
    writeFileSync(path, `#!/bin/sh\n${script}\n`);
    chmodSync(path, 0o755);
    const ctx = loadKubeConfig({ path: file(config({ exec: { command: path, apiVersion } })) });
    return runExecPlugin(ctx, ctx.user.exec!);
  };
  const cred = (status: object, apiVersion = "client.authentication.k8s.io/v1") =>
    `echo '${JSON.stringify({ apiVersion, kind: "ExecCredential", status })}'`;

  it("reads the credential a plugin prints", async () => {
    assert.deepEqual(await plugin(cred({ token: "t" })), { token: "t" });
  });

  it("reports a failing, silent, mismatched or empty plugin with its reason", async () => {
    await assert.rejects(plugin("echo denied >&2; exit 3"), /exited with 3: denied/);
    await assert.rejects(plugin("echo not json"), /printed no ExecCredential JSON: not json/);
    await assert.rejects(
      plugin(cred({ token: "t" }, "client.authentication.k8s.io/v1beta1")),
      /want ExecCredential client\.authentication\.k8s\.io\/v1/,
    );
    await assert.rejects(plugin(cred({})), /neither status\.token nor a client certificate/);
    await assert.rejects(
      plugin(cred({ token: "t" }), "client.authentication.k8s.io/v1alpha1"),
      /exec\.apiVersion "client\.authentication\.k8s\.io\/v1alpha1" is not one of/,
    );
    const ctx = loadKubeConfig({
      path: file(
        config({
          exec: { command: join(dir, "no-such-plugin"), apiVersion: "client.authentication.k8s.io/v1" },
        }),
      ),
    });
    await assert.rejects(runExecPlugin(ctx, ctx.user.exec!), /could not run: .*ENOENT/);
  });
});
