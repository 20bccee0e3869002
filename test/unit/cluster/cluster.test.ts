// test-needs: openssl
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import { parseAllDocuments } from "yaml";
import { kwokRbac } from "../../../src/cluster/bootstrap.ts";
import { ClusterError, down, up } from "../../../src/cluster/cluster.ts";
import { renderKubeconfig } from "../../../src/cluster/kubeconfig.ts";
import { nodePaths } from "../../../src/cluster/node/config.ts";
import { kwokStagesFile, wrapperModulesDir } from "../../../src/cluster/paths.ts";
import { generatePki } from "../../../src/cluster/pki.ts";
import { versions } from "../../../src/cluster/versions.ts";
import { scratchDir } from "../../harness/scratch.ts";

describe("pinned versions", () => {
  it("match the Go wrapper modules", () => {
    const k8s = readFileSync(join(wrapperModulesDir, "kubernetes", "go.mod"), "utf8");
    assert.match(k8s, new RegExp(`\\tk8s\\.io/kubernetes ${versions.kubernetes.replaceAll(".", "\\.")}\\b`));
    const staging = versions.kubernetes.replace(/^v1\./, "v0.");
    const replaces = [...k8s.matchAll(/^\t(k8s\.io\/\S+) => \S+ (\S+)$/gm)];
    assert.ok(replaces.length >= 30, "every staging module is replaced");
    for (const [, module, version] of replaces) assert.equal(version, staging, module);
    const etcd = readFileSync(join(wrapperModulesDir, "etcd", "go.mod"), "utf8");
    assert.match(
      etcd,
      new RegExp(`go\\.etcd\\.io/etcd/server/v3 ${versions.etcd.replaceAll(".", "\\.")}\\b`),
    );
  });
});

describe("kwok stages", () => {
  const stages = parseAllDocuments(readFileSync(kwokStagesFile, "utf8")).map(
    (d) =>
      d.toJS() as {
        kind: string;
        metadata: { name: string };
        spec: { resourceRef: { kind: string } };
      },
  );
  it("cover the normal pod and node life", () => {
    const names = stages.map((s) => s.metadata.name);
    for (const needed of ["node-initialize", "node-heartbeat", "pod-ready", "pod-complete", "pod-delete"]) {
      assert.ok(names.includes(needed), needed);
    }
  });
  it("offer the opt-in failure modes", () => {
    const names = stages.map((s) => s.metadata.name);
    for (const mode of ["crash-loop", "image-pull-error", "never-ready", "job-failure"]) {
      assert.ok(names.includes(`simulate-${mode}`), mode);
    }
    for (const s of stages) assert.equal(s.kind, "Stage");
  });
});

describe("pki", () => {
  it("issues certificates that chain to the CA with the right identities", async () => {
    const pki = await generatePki();
    const dir = scratchDir("pki");
    const file = (name: string, content: string) => {
      const path = join(dir, `mlmodel-pki-test-${process.pid}-${name}`);
      writeFileSync(path, content);
      return path;
    };
    const ca = file("ca.pem", pki.ca.certPem);
    const verify = (cert: string) =>
      execFileSync("openssl", ["verify", "-CAfile", ca, file("leaf.pem", cert)], { encoding: "utf8" });
    assert.match(verify(pki.apiserver.certPem), /OK/);
    assert.match(verify(pki.clients.admin!.certPem), /OK/);
    const subject = execFileSync(
      "openssl",
      ["x509", "-noout", "-subject", "-in", file("admin.pem", pki.clients.admin!.certPem)],
      { encoding: "utf8" },
    );
    assert.match(subject, /O ?= ?system:masters/);
    const sans = execFileSync(
      "openssl",
      ["x509", "-noout", "-ext", "subjectAltName", "-in", file("srv.pem", pki.apiserver.certPem)],
      { encoding: "utf8" },
    );
    assert.match(sans, /IP Address:127\.0\.0\.1/);
  });

  it("puts only the admin in system:masters: the other components get their least-privileged identities", async () => {
    const pki = await generatePki({ nodeName: "mlmodel-node", nodeIp: "10.77.0.1" });
    const subject = (name: string) => new X509Certificate(pki.clients[name]!.certPem).subject.split("\n");
    assert.deepEqual(subject("admin"), ["CN=mlmodel-admin", "O=system:masters"]);
    assert.deepEqual(subject("kube-controller-manager"), ["CN=system:kube-controller-manager"]);
    assert.deepEqual(subject("kube-scheduler"), ["CN=system:kube-scheduler"]);
    assert.deepEqual(subject("kwok"), [`CN=${kwokRbac().binding.subjects![0]!.name}`]);
    const masters = Object.keys(pki.clients).filter((name) => subject(name).includes("O=system:masters"));
    assert.deepEqual(masters, ["admin"]);
  });

  it("gives etcd a CA of its own, under the cluster CA, that signed only etcd's and the API server's certificates", async () => {
    const pki = await generatePki({ nodeName: "mlmodel-node", nodeIp: "10.77.0.1" });
    const clusterCa = new X509Certificate(pki.ca.certPem);
    const etcdCa = new X509Certificate(pki.etcd.ca);
    assert.ok(etcdCa.ca && etcdCa.verify(clusterCa.publicKey), "etcd's CA is signed by the cluster CA");
    const clientAuth = "1.3.6.1.5.5.7.3.2";
    const serverAuth = "1.3.6.1.5.5.7.3.1";
    // What etcd admits (--trusted-ca-file, --client-cert-auth): a client certificate its CA signed.
    const admitted = (pem: string) => {
      const cert = new X509Certificate(pem);
      return cert.verify(etcdCa.publicKey) && (cert.keyUsage ?? []).includes(clientAuth);
    };
    assert.ok(admitted(pki.etcd.apiserverClient.certPem), "the API server's etcd client certificate");
    const others = {
      ...Object.fromEntries(
        Object.entries(pki.clients).map(([name, pair]) => [`client ${name}`, pair.certPem]),
      ),
      "API server serving": pki.apiserver.certPem,
      "kubelet serving": pki.realNode!.kubeletServing.certPem,
      "API server towards kubelets": pki.realNode!.apiserverKubeletClient.certPem,
    };
    for (const [name, pem] of Object.entries(others)) assert.equal(admitted(pem), false, name);
    // etcd's certificate comes with its CA, so that clients trusting the cluster CA verify it.
    const [leaf, chained] = pki.etcd.server.certPem.split(/(?<=-----END CERTIFICATE-----\n)/);
    assert.equal(chained, pki.etcd.ca);
    const server = new X509Certificate(leaf!);
    assert.ok(server.verify(etcdCa.publicKey));
    assert.deepEqual([...(server.keyUsage ?? [])].sort(), [serverAuth, clientAuth].sort());
    assert.ok(server.checkIP("127.0.0.1"), "etcd is reached at 127.0.0.1");
  });

  it("renders a self-contained kubeconfig", () => {
    const text = renderKubeconfig({
      server: "https://127.0.0.1:1",
      caPem: "CA",
      certPem: "CERT",
      keyPem: "KEY",
      user: "admin",
    });
    assert.match(text, /certificate-authority-data: Q0E=/);
    assert.match(text, /current-context: mlmodel-local/);
  });
});

describe("a real node's cluster directory", () => {
  it("is refused before anything starts unless only root can change it, naming the path, its mode and the fix", async () => {
    const dir = join(scratchDir("open-cluster"), "cluster");
    mkdirSync(dir);
    chmodSync(dir, 0o755);
    await assert.rejects(up({ dir, realNode: true }), (err: Error) => {
      assert.ok(err instanceof ClusterError);
      assert.match(
        err.message,
        new RegExp(`^the cluster directory ${dir} is owned by uid \\d+ with mode 0755`),
      );
      assert.match(err.message, new RegExp(`chmod 0700 ${dir}`));
      return true;
    });
    assert.deepEqual(readdirSync(dir), [], "nothing was written into it");
  });

  it("is refused by down when it holds a node's journal that others could have written", async () => {
    const dir = join(scratchDir("open-journal"), "cluster");
    const journal = nodePaths(dir).journal;
    mkdirSync(dirname(journal), { recursive: true });
    // Whatever such a journal names (a sysctl, a bridge, a pid), down must not act on it as root.
    writeFileSync(journal, JSON.stringify({ version: 1, processes: [] }));
    chmodSync(dir, 0o777);
    await assert.rejects(down(dir), (err: Error) => {
      assert.ok(err instanceof ClusterError);
      assert.match(
        err.message,
        new RegExp(`^the cluster directory ${dir} is owned by uid \\d+ with mode 0777`),
      );
      return true;
    });
    assert.ok(existsSync(journal), "left as it was");
  });
});
