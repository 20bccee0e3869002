/**
 * The runtime's KubeClient authenticates with every kubeconfig credential form the real API
 * server accepts: a client certificate, a bearer token, an exec plugin, and in-cluster (token
 * file and CA). The API server says who it saw (a SelfSubjectReview), so each test proves the
 * credential was used, not merely that a request went through. Basic auth is covered by
 * test/unit/runtime/kubeconfig-auth.test.ts only: kube-apiserver no longer accepts it.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CoreV1Api, KubeConfig, type User } from "@kubernetes/client-node";
import { builtinKinds, KubeClient } from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace } from "../../harness/cluster.ts";
import { inClusterKubeConfig } from "../../harness/in-cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { whoAmI } from "../../harness/whoami.ts";

describe("KubeClient credentials (real API server)", () => {
  const admin = kubeConfig();
  const cluster = admin.getCurrentCluster()!;
  const caPem =
    cluster.caData !== undefined
      ? Buffer.from(cluster.caData, "base64").toString()
      : readFileSync(cluster.caFile!, "utf8");
  const dir = scratchDir("client-auth");
  let ns: TestNamespace;
  let token: string;
  let account: string;

  /** A kubeconfig for the test cluster with this user. */
  function withUser(user: Omit<User, "name">): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "test", server: cluster.server, caData: Buffer.from(caPem).toString("base64") }],
      users: [{ name: "someone", ...user }],
      contexts: [{ name: "test", cluster: "test", user: "someone" }],
      currentContext: "test",
    });
    return kc;
  }

  before(async () => {
    ns = await createNamespace("rt-auth");
    const admins = KubeClient.fromKubeConfig(admin);
    await admins.create(builtinKinds.ServiceAccount, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: "reader", namespace: ns.name },
    });
    const res = await admin.makeApiClient(CoreV1Api).createNamespacedServiceAccountToken({
      name: "reader",
      namespace: ns.name,
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    });
    token = res.status?.token ?? assert.fail("the API server returned no token");
    account = `system:serviceaccount:${ns.name}:reader`;
  });
  after(async () => {
    await ns.delete();
  });

  it("client certificate (the local cluster's admin kubeconfig)", async () => {
    assert.equal(await whoAmI(KubeClient.fromKubeConfig(admin)), "mlmodel-admin");
  });

  it("bearer token", async () => {
    assert.equal(await whoAmI(KubeClient.fromKubeConfig(withUser({ token }))), account);
  });

  it("exec plugin (client.authentication.k8s.io/v1) handing out a token", async () => {
    const plugin = join(dir, "plugin.mjs");
    writeFileSync(
      plugin,
      `console.log(JSON.stringify({ apiVersion: "client.authentication.k8s.io/v1", kind: "ExecCredential", status: { token: process.env.TOKEN } }));`,
    );
    const kc = withUser({
      exec: {
        apiVersion: "client.authentication.k8s.io/v1",
        command: process.execPath,
        args: [plugin],
        env: [{ name: "TOKEN", value: token }],
        interactiveMode: "Never",
      },
    } as Omit<User, "name">);
    assert.equal(await whoAmI(KubeClient.fromKubeConfig(kc)), account);
  });

  it("in-cluster: the service account token file and CA, the API server from the environment", async () => {
    const url = new URL(cluster.server);
    const kc = inClusterKubeConfig(join(dir, "pod"), {
      token,
      ca: caPem,
      namespace: ns.name,
      host: url.hostname,
      port: url.port,
    });
    assert.equal(await whoAmI(KubeClient.fromKubeConfig(kc)), account);
  });
});
