/**
 * kubeConfigConnection: every credential form client-node reads from a kubeconfig reaches the
 * request as it should (headers asked before each request, the TLS settings (and so the
 * connection pool) replaced only when the TLS material changes). test/integration/runtime/client-auth.test.ts shows the same forms
 * authenticating against the real API server; basic auth is only here, since kube-apiserver
 * dropped it in 1.19.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { KubeConfig, type User } from "@kubernetes/client-node";
import { kubeConfigConnection } from "../../../src/runtime/index.ts";
import { inClusterKubeConfig } from "../../harness/in-cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";

function kubeConfigFor(user: Omit<User, "name">, server = "https://127.0.0.1:6443"): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    // client-node refuses plain http unless TLS verification is off.
    clusters: [{ name: "c", server, skipTLSVerify: server.startsWith("http:") }],
    users: [{ name: "u", ...user }],
    contexts: [{ name: "ctx", cluster: "c", user: "u" }],
    currentContext: "ctx",
  });
  return kc;
}

const dir = scratchDir("kubeconfig-auth");

/**
 * An exec credential plugin (client.authentication.k8s.io/v1) that answers with TOKEN, or with
 * a client certificate numbered by how often it ran (expired at once, so every call runs it).
 */
const plugin = join(dir, "plugin.mjs");
writeFileSync(
  plugin,
  `import { readFileSync, writeFileSync } from "node:fs";
const counter = process.env.COUNTER;
let status = { token: process.env.TOKEN };
if (counter) {
  const n = Number(readFileSync(counter, "utf8") || "0") + 1;
  writeFileSync(counter, String(n));
  status = { clientCertificateData: "CERT-" + n, clientKeyData: "KEY-" + n, expirationTimestamp: "2000-01-01T00:00:00Z" };
}
console.log(JSON.stringify({ apiVersion: "client.authentication.k8s.io/v1", kind: "ExecCredential", status }));
`,
);

function execUser(env: Record<string, string>): Omit<User, "name"> {
  return {
    exec: {
      apiVersion: "client.authentication.k8s.io/v1",
      command: process.execPath,
      args: [plugin],
      env: Object.entries(env).map(([name, value]) => ({ name, value })),
      interactiveMode: "Never",
    },
  } as Omit<User, "name">;
}

describe("kubeConfigConnection: kubeconfig credentials", () => {
  it("bearer token: Authorization Bearer, and one TLS settings object for every request", async () => {
    const conn = kubeConfigConnection(kubeConfigFor({ token: "t0ken" }));
    assert.equal(conn.tls, undefined, "built on the first request");
    assert.deepEqual(await conn.headers(), { Authorization: "Bearer t0ken" });
    const first = conn.tls;
    assert.ok(first, "https: TLS settings");
    await conn.headers();
    assert.equal(conn.tls, first, "same TLS material: the same settings (its connection pool reused)");
  });

  it("basic auth (username/password): Authorization Basic", async () => {
    const conn = kubeConfigConnection(kubeConfigFor({ username: "alice", password: "s3cret" }));
    const headers = await conn.headers();
    assert.equal(headers["Authorization"], `Basic ${Buffer.from("alice:s3cret").toString("base64")}`);
  });

  it("client certificate: no Authorization header, TLS settings that carry it", async () => {
    const b64 = (s: string) => Buffer.from(s).toString("base64");
    const conn = kubeConfigConnection(kubeConfigFor({ certData: b64("CERT"), keyData: b64("KEY") }));
    assert.equal((await conn.headers())["Authorization"], undefined);
    assert.ok(conn.tls?.cert && conn.tls.key, "the certificate and key go into the TLS settings");
  });

  it("impersonation: the Impersonate-User header goes with the credential", async () => {
    const conn = kubeConfigConnection(kubeConfigFor({ token: "t", impersonateUser: "bob" }));
    assert.deepEqual(await conn.headers(), { Authorization: "Bearer t", "Impersonate-User": "bob" });
  });

  it("exec plugin with a token: its token is the bearer", async () => {
    const conn = kubeConfigConnection(kubeConfigFor(execUser({ TOKEN: "from-plugin" })));
    assert.equal((await conn.headers())["Authorization"], "Bearer from-plugin");
  });

  it("exec plugin with client certificates: a new certificate gets new TLS settings", async () => {
    const counter = join(dir, "counter");
    writeFileSync(counter, "0");
    const conn = kubeConfigConnection(kubeConfigFor(execUser({ COUNTER: counter })));
    await conn.headers();
    const first = conn.tls;
    await conn.headers();
    assert.ok(first && conn.tls);
    assert.notEqual(conn.tls, first, "CERT-2 replaced CERT-1: the old pool must not be reused");
  });

  it("in-cluster: reads the service account's token file and CA", async () => {
    const kc = inClusterKubeConfig(join(dir, "pod"), {
      token: "pod-token",
      ca: "CA",
      namespace: "ml",
      host: "127.0.0.1",
      port: "6443",
    });
    const conn = kubeConfigConnection(kc);
    assert.equal(conn.server, "https://127.0.0.1:6443");
    assert.equal((await conn.headers())["Authorization"], "Bearer pod-token");
    assert.ok(conn.tls, "the CA goes into the TLS settings");
  });

  it("plain http: no TLS settings", async () => {
    const conn = kubeConfigConnection(kubeConfigFor({ token: "t" }, "http://127.0.0.1:8080"));
    await conn.headers();
    assert.equal(conn.tls, undefined);
  });

  it("a kubeconfig without a current cluster is refused, naming the context", () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({ clusters: [], users: [], contexts: [], currentContext: "nowhere" });
    assert.throws(() => kubeConfigConnection(kc), /no current cluster \(current-context "nowhere"\)/);
  });
});
