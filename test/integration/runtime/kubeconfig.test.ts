/**
 * The runtime's own kubeconfig loader against the real API server: every way a kubeconfig can
 * say who we are, proven by asking the server who it thinks we are (SelfSubjectReview).
 *
 *   token, token-file (and its rotation), client certificate as inline data and as files,
 *   an exec plugin printing a token or a client certificate (a tiny script), in-cluster
 *   (KUBERNETES_SERVICE_HOST/PORT and a service-account directory), and an auth-provider user
 *   (handed to client-node, imported on first use). Basic auth has no real-server test: the
 *   API server dropped it in 1.19 (the header is unit-tested).
 */
import assert from "node:assert/strict";
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CoreV1Api } from "@kubernetes/client-node";
import { stringify } from "yaml";
import {
  builtinKinds,
  KubeClient,
  type KubeContext,
  kubeConnection,
  loadKubeConfig,
} from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { whoAmI } from "../../harness/whoami.ts";

interface Admin {
  /** Who the API server says the admin certificate is (its common name). */
  name: string;
  server: string;
  caData: string;
  certData: string;
  keyData: string;
}

/** The local cluster's admin kubeconfig: the server, its CA, and a client certificate. */
async function adminMaterial(): Promise<Admin> {
  const ctx = loadKubeConfig({ path: process.env.KUBECONFIG! });
  const u = ctx.user;
  assert.ok(
    u["client-certificate-data"] && u["client-key-data"],
    "the local admin authenticates by certificate",
  );
  return {
    // Asked through client-node, the reference this loader must agree with.
    name: await whoAmI(KubeClient.fromKubeConfig(kubeConfig())),
    server: ctx.cluster.server,
    caData: ctx.cluster["certificate-authority-data"]!,
    certData: u["client-certificate-data"],
    keyData: u["client-key-data"],
  };
}

describe("kubeconfig forms against the real API server", () => {
  const dir = scratchDir("kubeconfig");
  let ns: TestNamespace;
  let admin: Admin;
  const tokens: Record<string, string> = {};

  /** Writes a kubeconfig with this user (cluster: the local one, by CA data) and loads it. */
  const load = (user: object, cluster: object = {}): KubeContext => {
    const path = join(dir, `kubeconfig-${Object.keys(tokens).length}-${Math.random().toString(36).slice(2)}`);
    writeFileSync(
      path,
      stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [
          {
            name: "local",
            cluster: { server: admin.server, "certificate-authority-data": admin.caData, ...cluster },
          },
        ],
        users: [{ name: "me", user }],
        contexts: [{ name: "ctx", context: { cluster: "local", user: "me" } }],
        "current-context": "ctx",
      }),
    );
    return loadKubeConfig({ path });
  };

  before(async () => {
    admin = await adminMaterial();
    ns = await createNamespace("rt-kubeconfig");
    const core = kubeConfig().makeApiClient(CoreV1Api);
    for (const name of ["alice", "bob"]) {
      await core.createNamespacedServiceAccount({ namespace: ns.name, body: { metadata: { name } } });
      const res = await core.createNamespacedServiceAccountToken({
        name,
        namespace: ns.name,
        body: { spec: { audiences: [], expirationSeconds: 3600 } },
      });
      tokens[name] = res.status?.token ?? "";
    }
  });
  after(async () => {
    await ns.delete();
  });

  const sa = (name: string) => `system:serviceaccount:${ns.name}:${name}`;

  it("a token from a TokenRequest", async () => {
    assert.equal(await whoAmI(kubeConnection(load({ token: tokens.alice }))), sa("alice"));
  });

  it("a token file, read again once a minute has passed (projected tokens rotate)", async () => {
    const file = join(dir, "token");
    writeFileSync(file, `${tokens.alice}\n`);
    let now = 0;
    const conn = kubeConnection(load({ "token-file": file }), { now: () => now });
    assert.equal(await whoAmI(conn), sa("alice"));
    writeFileSync(file, tokens.bob!);
    now += 30_000;
    assert.equal(await whoAmI(conn), sa("alice"), "within the minute the token read is kept");
    now += 30_000;
    assert.equal(await whoAmI(conn), sa("bob"), "after a minute the file is read again");
  });

  it("a client certificate as inline data and as files relative to the kubeconfig", async () => {
    const inline = load({ "client-certificate-data": admin.certData, "client-key-data": admin.keyData });
    assert.equal(await whoAmI(kubeConnection(inline)), admin.name);
    writeFileSync(join(dir, "admin.crt"), Buffer.from(admin.certData, "base64"));
    writeFileSync(join(dir, "admin.key"), Buffer.from(admin.keyData, "base64"));
    writeFileSync(join(dir, "ca.crt"), Buffer.from(admin.caData, "base64"));
    const files = load(
      { "client-certificate": "admin.crt", "client-key": "admin.key" },
      { "certificate-authority-data": undefined, "certificate-authority": "ca.crt" },
    );
    assert.equal(files.user["client-certificate"], join(dir, "admin.crt"));
    assert.equal(await whoAmI(kubeConnection(files)), admin.name);
  });

  it("an exec plugin printing an ExecCredential: run once while its token is valid, told it is not interactive", async () => {
    const plugin = join(dir, "plugin.sh");
    const calls = join(dir, "plugin-calls");
    const info = join(dir, "plugin-info");
    writeFileSync(calls, "");
    writeFileSync(
      plugin,
      [
        "#!/bin/sh",
        `echo run >> "${calls}"`,
        `printf '%s' "$KUBERNETES_EXEC_INFO" > "${info}"`,
        `printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"2999-01-01T00:00:00Z"}}' "$PLUGIN_TOKEN"`,
      ].join("\n"),
    );
    chmodSync(plugin, 0o755);
    const conn = kubeConnection(
      load({
        exec: {
          apiVersion: "client.authentication.k8s.io/v1",
          command: "./plugin.sh",
          env: [{ name: "PLUGIN_TOKEN", value: tokens.bob }],
          interactiveMode: "Never",
        },
      }),
    );
    assert.equal(await whoAmI(conn), sa("bob"));
    assert.equal(await whoAmI(conn), sa("bob"));
    assert.equal(
      readFileSync(calls, "utf8").trim().split("\n").length,
      1,
      "the credential is cached until it expires",
    );
    assert.deepEqual(JSON.parse(readFileSync(info, "utf8")), {
      apiVersion: "client.authentication.k8s.io/v1",
      kind: "ExecCredential",
      spec: { interactive: false },
    });
  });

  it("an exec plugin printing a client certificate", async () => {
    const plugin = join(dir, "cert-plugin.sh");
    const cred = {
      apiVersion: "client.authentication.k8s.io/v1beta1",
      kind: "ExecCredential",
      status: {
        clientCertificateData: Buffer.from(admin.certData, "base64").toString(),
        clientKeyData: Buffer.from(admin.keyData, "base64").toString(),
      },
    };
    writeFileSync(join(dir, "cred.json"), JSON.stringify(cred));
    writeFileSync(plugin, `#!/bin/sh\ncat "${join(dir, "cred.json")}"\n`);
    chmodSync(plugin, 0o755);
    const ctx = load({ exec: { apiVersion: "client.authentication.k8s.io/v1beta1", command: plugin } });
    assert.equal(await whoAmI(kubeConnection(ctx)), admin.name);
  });

  it("in-cluster: the kubernetes Service's host and port from the environment, token and CA from the service-account directory", async () => {
    const sadir = scratchDir("serviceaccount");
    writeFileSync(join(sadir, "token"), tokens.alice!);
    writeFileSync(join(sadir, "ca.crt"), Buffer.from(admin.caData, "base64"));
    writeFileSync(join(sadir, "namespace"), ns.name);
    const url = new URL(admin.server);
    const ctx = loadKubeConfig({
      env: { KUBERNETES_SERVICE_HOST: url.hostname, KUBERNETES_SERVICE_PORT: url.port },
      serviceAccountDir: sadir,
    });
    assert.equal(ctx.source, "in-cluster");
    assert.equal(ctx.namespace, ns.name);
    assert.equal(await whoAmI(kubeConnection(ctx)), sa("alice"));
  });

  it("an auth-provider user goes through client-node (its tokenFile provider here)", async () => {
    const file = join(dir, "provider-token");
    writeFileSync(file, tokens.bob!);
    const ctx = load({ "auth-provider": { name: "tokenFile", config: { tokenFile: file } } });
    assert.equal(await whoAmI(kubeConnection(ctx)), sa("bob"));
  });

  it("reads the same cluster as client-node does from the test's kubeconfig, and lists with it", async () => {
    const client = new KubeClient(kubeConnection(loadKubeConfig()));
    const list = await client.list(builtinKinds.Namespace, { limit: 1 });
    assert.ok(list.resourceVersion, "the default chain ($KUBECONFIG) reaches the test cluster");
    assert.equal(kubeConfig().getCurrentCluster()?.server, loadKubeConfig().cluster.server);
  });
});
