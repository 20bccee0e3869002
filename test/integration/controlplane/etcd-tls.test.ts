// etcd admits only the API server: whoever can write to etcd can run pods as root on a real
// node, so a local user must not reach it without TLS, without a client certificate, or with
// another certificate of the cluster CA (the admin's, kwok's). The API server, which holds the
// one admitted certificate, still stores and reads objects through it.
import assert from "node:assert/strict";
import http from "node:http";
import https from "node:https";
import { join } from "node:path";
import { describe, it } from "node:test";
import { KubeConfig } from "@kubernetes/client-node";
import { etcdClientTls } from "../../../src/cluster/cluster.ts";
import { coreApi, kubeConfig, localCluster } from "../../harness/cluster.ts";

const cluster = localCluster();
const noLocalCluster = cluster
  ? false
  : "runs against the local control plane's etcd (MLMODEL_TEST_CLUSTER_DIR)";

interface Answer {
  status?: number;
  body: string;
  error?: string;
}

interface ClientTls {
  ca?: string;
  cert?: string;
  key?: string;
}

/** One request to etcd: its HTTP status and body, or the error that stopped it. */
function ask(url: string, tls: ClientTls, body?: unknown): Promise<Answer> {
  return new Promise((resolve) => {
    const target = new URL(url);
    const options = {
      method: body === undefined ? "GET" : "POST",
      timeout: 5000,
      ...(target.protocol === "https:" ? tls : {}),
    };
    const onResponse = (res: http.IncomingMessage) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        text += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode, body: text }));
      res.on("error", (err) => resolve({ body: text, error: err.message }));
    };
    const request =
      target.protocol === "https:"
        ? https.request(target, options, onResponse)
        : http.request(target, options, onResponse);
    request.on("error", (err) =>
      resolve({ body: "", error: `${(err as NodeJS.ErrnoException).code}: ${err.message}` }),
    );
    request.on("timeout", () => request.destroy(new Error("no answer within 5 s")));
    request.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** The client certificate and key of a kubeconfig of the cluster (signed by the same CA). */
function kubeconfigTls(path: string): { cert: string; key: string } {
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  const user = kc.getCurrentUser();
  assert.ok(user?.certData && user.keyData, `${path} has a client certificate`);
  return {
    cert: Buffer.from(user.certData, "base64").toString("utf8"),
    key: Buffer.from(user.keyData, "base64").toString("utf8"),
  };
}

const range = { key: "AA==", range_end: "AA==", count_only: true };

describe("etcd of the local control plane", { skip: noLocalCluster }, () => {
  const endpoint = () => {
    const state = cluster!;
    assert.match(state.etcdEndpoint, /^https:\/\/127\.0\.0\.1:\d+$/, "etcd is reached over HTTPS");
    return state.etcdEndpoint;
  };

  it("answers the API server's client certificate (the one it admits)", async () => {
    const tls = await etcdClientTls(cluster!.dir);
    const health = await ask(`${endpoint()}/health`, tls);
    assert.equal(health.status, 200, health.error ?? health.body);
    assert.match(health.body, /"health":"true"/);
    const read = await ask(`${endpoint()}/v3/kv/range`, tls, range);
    assert.equal(read.status, 200, read.error ?? read.body);
    assert.match(read.body, /"revision":"\d+"/);
  });

  it("refuses plain HTTP", async () => {
    const plain = endpoint().replace(/^https:/, "http:");
    for (const path of ["/health", "/v3/kv/range"]) {
      const answer = await ask(`${plain}${path}`, {}, path === "/health" ? undefined : range);
      assert.notEqual(answer.status, 200, `${path} over plain HTTP: ${answer.body}`);
      assert.doesNotMatch(answer.body, /"health"|"revision"/);
    }
  });

  it("refuses a client without a certificate and clients with another certificate of the cluster CA", async () => {
    const { ca } = await etcdClientTls(cluster!.dir);
    const clients: Record<string, ClientTls> = {
      "no client certificate": { ca },
      "the admin's certificate (system:masters)": {
        ca,
        ...kubeconfigTls(join(cluster!.dir, "admin.kubeconfig")),
      },
      "kwok's certificate": { ca, ...kubeconfigTls(join(cluster!.dir, "kubeconfigs", "kwok.kubeconfig")) },
    };
    for (const [who, tls] of Object.entries(clients)) {
      for (const path of ["/health", "/v3/kv/range"]) {
        const answer = await ask(`${endpoint()}${path}`, tls, path === "/health" ? undefined : range);
        assert.equal(answer.status, undefined, `${who} on ${path} got HTTP ${answer.status}: ${answer.body}`);
        assert.ok(answer.error, `${who} on ${path} is refused at the TLS layer`);
      }
    }
  });

  it("still stores what the API server is given", async () => {
    const core = coreApi(kubeConfig());
    const name = `etcd-tls-${process.pid}`;
    await core.createNamespacedConfigMap({
      namespace: "default",
      body: { metadata: { name }, data: { a: "1" } },
    });
    try {
      const read = await core.readNamespacedConfigMap({ name, namespace: "default" });
      assert.deepEqual(read.data, { a: "1" });
    } finally {
      await core.deleteNamespacedConfigMap({ name, namespace: "default" });
    }
  });
});
