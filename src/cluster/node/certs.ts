/**
 * Each node of a multi-node cluster has an identity of its own, signed by the cluster CA that
 * `up` generated: kubelet's client certificate (`system:node:<name>`, so the Node authorizer
 * and NodeRestriction confine it to its own Node and pods) and kubelet's serving certificate
 * (the node's address in its SANs, so the API server verifies it when it calls the kubelet).
 * The kubeconfigs of the node's agents name the API server at the host's address on the node
 * network: a node's loopback is its own namespace's.
 */
import { webcrypto } from "node:crypto";
import { readFile } from "node:fs/promises";
// @peculiar/x509 resolves its ASN.1 schemas through tsyringe, which needs this polyfill.
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { renderKubeconfig } from "../kubeconfig.ts";
import { type KeyPair, realNodeClientSubjects } from "../pki.ts";

const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const validityMs = 365 * 24 * 3600_000;

interface Ca {
  cert: x509.X509Certificate;
  key: webcrypto.CryptoKey;
  certPem: string;
}

export async function loadCa(certFile: string, keyFile: string): Promise<Ca> {
  const certPem = await readFile(certFile, "utf8");
  const keyPem = await readFile(keyFile, "utf8");
  const der = Buffer.from(keyPem.replace(/-----[^-]+-----/g, "").replace(/\s/g, ""), "base64");
  const key = await webcrypto.subtle.importKey("pkcs8", der, algorithm, true, ["sign"]);
  return { cert: new x509.X509Certificate(certPem), key, certPem };
}

async function issue(
  ca: Ca,
  subject: string,
  usage: "server" | "client",
  ips: string[] = [],
  dnsNames: string[] = [],
): Promise<KeyPair> {
  const keys = (await webcrypto.subtle.generateKey(algorithm, true, [
    "sign",
    "verify",
  ])) as webcrypto.CryptoKeyPair;
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(
      x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
      true,
    ),
    new x509.ExtendedKeyUsageExtension([
      usage === "server" ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth,
    ]),
  ];
  const altNames = [
    ...ips.map((value) => ({ type: "ip" as const, value })),
    ...dnsNames.map((value) => ({ type: "dns" as const, value })),
  ];
  if (altNames.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(altNames));
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)))
      .toString("hex")
      .replace(/^[89a-f]/, "1"),
    subject,
    issuer: ca.cert.subject,
    // Back-dated a little: a slightly skewed clock must not reject a fresh certificate.
    notBefore: new Date(Date.now() - 3600_000),
    notAfter: new Date(Date.now() + validityMs),
    signingAlgorithm: algorithm,
    publicKey: keys.publicKey,
    signingKey: ca.key,
    extensions,
  });
  const keyDer = await webcrypto.subtle.exportKey("pkcs8", keys.privateKey);
  const body =
    Buffer.from(keyDer)
      .toString("base64")
      .match(/.{1,64}/g)
      ?.join("\n") ?? "";
  return {
    certPem: cert.toString("pem"),
    keyPem: `-----BEGIN PRIVATE KEY-----\n${body}\n-----END PRIVATE KEY-----\n`,
  };
}

export interface MemberCredentials {
  kubeletServing: KeyPair;
  kubeletKubeconfig: string;
}

/** kubelet's serving certificate and its kubeconfig (its client certificate inlined) for one node. */
export async function memberCredentials(
  ca: Ca,
  member: { name: string; nodeIp: string },
  server: string,
): Promise<MemberCredentials> {
  const kubeletServing = await issue(
    ca,
    `CN=system:node:${member.name}, O=system:nodes`,
    "server",
    [member.nodeIp],
    [member.name],
  );
  const client = await issue(ca, realNodeClientSubjects(member.name).kubelet!, "client");
  return {
    kubeletServing,
    kubeletKubeconfig: renderKubeconfig({
      server,
      caPem: ca.certPem,
      certPem: client.certPem,
      keyPem: client.keyPem,
      user: `system:node:${member.name}`,
    }),
  };
}
