/**
 * TLS material for the local control plane: one CA, the API server's serving certificate,
 * one client certificate per component (with distinct common names so the audit log says who
 * wrote what), etcd's own CA (signed by the cluster CA) with etcd's serving certificate and
 * the API server's client certificate towards etcd, and the service-account signing key pair.
 *
 * ECDSA P-256 throughout: key generation takes milliseconds where RSA takes a second.
 */
import { webcrypto } from "node:crypto";
// @peculiar/x509 resolves its ASN.1 schemas through tsyringe, which needs this polyfill.
import "reflect-metadata";
import * as x509 from "@peculiar/x509";
import { clusterNetwork } from "./network.ts";
import { nodeIdentities } from "./node/objects.ts";

x509.cryptoProvider.set(webcrypto as never);

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

const algorithm = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const validityDays = 365;

export interface KeyPair {
  certPem: string;
  keyPem: string;
}

export interface ClusterPki {
  ca: KeyPair;
  apiserver: KeyPair;
  etcd: EtcdPki;
  clients: Record<string, KeyPair>;
  serviceAccount: { publicKeyPem: string; privateKeyPem: string };
  /** Present when the cluster has a real node. */
  realNode?: RealNodePki;
}

export interface RealNodePki {
  /** kubelet's serving certificate: the API server verifies it when it calls the kubelet. */
  kubeletServing: KeyPair;
  /** The API server's client certificate towards the kubelet (--kubelet-client-certificate). */
  apiserverKubeletClient: KeyPair;
}

/**
 * etcd trusts a CA of its own, signed by the cluster CA, that signs two certificates only:
 * etcd's and the API server's client certificate. Its key is never written anywhere, so no
 * other client certificate for etcd can ever be issued, and every certificate of the cluster
 * CA (the admin's, kwok's, a node's) is refused by etcd. (etcd's allowed-hostname check
 * cannot do this: it also rejects etcd's JSON gateway, which calls etcd's gRPC service
 * without verifying the chain.)
 */
export interface EtcdPki {
  /** etcd's trust anchor (--trusted-ca-file): the cluster CA's delegate for etcd. */
  ca: string;
  /** etcd's serving and peer certificate, followed by etcd's CA so that clients of the cluster CA verify it. */
  server: KeyPair;
  /** The API server's client certificate towards etcd. */
  apiserverClient: KeyPair;
}

export interface RealNodeIdentity {
  nodeName: string;
  nodeIp: string;
}

function pem(label: string, der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString("base64");
  const lines = b64.match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

async function newKeys(): Promise<CryptoKeyPair> {
  return (await webcrypto.subtle.generateKey(algorithm, true, ["sign", "verify"])) as CryptoKeyPair;
}

async function privateKeyPem(key: CryptoKey): Promise<string> {
  return pem("PRIVATE KEY", await webcrypto.subtle.exportKey("pkcs8", key));
}

function validity(): { notBefore: Date; notAfter: Date } {
  // Back-date a little so that a slightly skewed clock does not reject a fresh cert.
  const notBefore = new Date(Date.now() - 60 * 60 * 1000);
  const notAfter = new Date(Date.now() + validityDays * 24 * 60 * 60 * 1000);
  return { notBefore, notAfter };
}

function serial(): string {
  return Buffer.from(webcrypto.getRandomValues(new Uint8Array(16)))
    .toString("hex")
    .replace(/^[89a-f]/, "1");
}

export type Ca = { cert: x509.X509Certificate; keys: CryptoKeyPair };

/** The cluster CA as `up` wrote it (PEM files), to issue more leaves from it later. */
export async function loadCa(certPem: string, keyPem: string): Promise<Ca> {
  const cert = new x509.X509Certificate(certPem);
  const der = Buffer.from(keyPem.replace(/-----[^-]+-----/g, "").replace(/\s/g, ""), "base64");
  const privateKey = await webcrypto.subtle.importKey("pkcs8", der, algorithm, true, ["sign"]);
  const publicKey = await cert.publicKey.export(algorithm, ["verify"], webcrypto as never);
  return { cert, keys: { privateKey, publicKey } };
}

/** A CA signed by `parent` that may sign leaves only (path length 0). */
async function createSubordinateCa(parent: Ca, name: string): Promise<Ca> {
  const keys = await newKeys();
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${name}`,
    issuer: parent.cert.subject,
    ...validity(),
    signingAlgorithm: algorithm,
    publicKey: keys.publicKey,
    signingKey: parent.keys.privateKey,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(parent.keys.publicKey),
    ],
  });
  return { cert, keys };
}

/** etcd's CA and the only two certificates it signs (see EtcdPki); its key stays in memory. */
async function createEtcdPki(clusterCa: Ca): Promise<EtcdPki> {
  const ca = await createSubordinateCa(clusterCa, "mlmodel-etcd-ca");
  const caPem = ca.cert.toString("pem");
  const server = await createLeaf(ca, {
    subject: "CN=mlmodel-etcd",
    usage: "server and client",
    ips: ["127.0.0.1"],
    dnsNames: ["localhost"],
  });
  return {
    ca: caPem,
    server: { certPem: `${server.certPem.trimEnd()}\n${caPem}`, keyPem: server.keyPem },
    apiserverClient: await createLeaf(ca, { subject: "CN=kube-apiserver-etcd-client", usage: "client" }),
  };
}

async function createCa(name = "mlmodel-local-ca"): Promise<Ca> {
  const keys = await newKeys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=${name}`,
    ...validity(),
    signingAlgorithm: algorithm,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { cert, keys };
}

export interface LeafOptions {
  subject: string;
  usage: "server" | "client" | "server and client";
  ips?: string[];
  dnsNames?: string[];
}

export async function createLeaf(ca: Ca, options: LeafOptions): Promise<KeyPair> {
  const keys = await newKeys();
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(
      x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
      true,
    ),
    new x509.ExtendedKeyUsageExtension([
      ...(options.usage === "client" ? [] : [x509.ExtendedKeyUsage.serverAuth]),
      ...(options.usage === "server" ? [] : [x509.ExtendedKeyUsage.clientAuth]),
    ]),
    await x509.AuthorityKeyIdentifierExtension.create(ca.keys.publicKey),
  ];
  const altNames = [
    ...(options.ips ?? []).map((value) => ({ type: "ip" as const, value })),
    ...(options.dnsNames ?? []).map((value) => ({ type: "dns" as const, value })),
  ];
  if (altNames.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(altNames));
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: options.subject,
    issuer: ca.cert.subject,
    ...validity(),
    signingAlgorithm: algorithm,
    publicKey: keys.publicKey,
    signingKey: ca.keys.privateKey,
    extensions,
  });
  return { certPem: cert.toString("pem"), keyPem: await privateKeyPem(keys.privateKey) };
}

/** The common name of kwok's client certificate, bound to its ClusterRole at bootstrap. */
export const kwokIdentity = "mlmodel:kwok";

/**
 * The subjects of the control plane's own client certificates, each least-privileged: the
 * controller manager and the scheduler are the users the API server's default RBAC binds
 * (system:kube-controller-manager, system:kube-scheduler, as on kubeadm clusters); kwok is
 * bound to a ClusterRole of what its stages do (bootstrap.ts). Only the admin, the cluster
 * owner's kubeconfig, is in system:masters.
 */
export const controlPlaneClientSubjects = {
  admin: "CN=mlmodel-admin, O=system:masters",
  "kube-controller-manager": "CN=system:kube-controller-manager",
  "kube-scheduler": "CN=system:kube-scheduler",
  kwok: `CN=${kwokIdentity}`,
} as const;

/**
 * Client identities of a real node's components: none is in system:masters. kubelet is a
 * node (Node authorizer + NodeRestriction), kube-proxy is bound by the default
 * system:node-proxier binding, the provisioner by its own ClusterRole (node/objects.ts).
 */
export function realNodeClientSubjects(nodeName: string): Record<string, string> {
  return {
    kubelet: `CN=system:node:${nodeName}, O=system:nodes`,
    "kube-proxy": `CN=${nodeIdentities.kubeProxy}`,
    "local-path-provisioner": `CN=${nodeIdentities.provisioner}`,
  };
}

export async function generatePki(realNode?: RealNodeIdentity): Promise<ClusterPki> {
  const ca = await createCa();
  const apiserver = await createLeaf(ca, {
    subject: "CN=kube-apiserver",
    usage: "server",
    // With a real node, pods reach the API server at the node's address (the endpoint of the
    // `kubernetes` Service), so the certificate must name it too.
    ips: ["127.0.0.1", clusterNetwork.kubernetesServiceIp, ...(realNode ? [realNode.nodeIp] : [])],
    dnsNames: ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
  });
  const etcd = await createEtcdPki(ca);
  const clients: Record<string, KeyPair> = {};
  for (const [identity, subject] of Object.entries(controlPlaneClientSubjects))
    clients[identity] = await createLeaf(ca, { subject, usage: "client" });
  if (realNode) {
    for (const [identity, subject] of Object.entries(realNodeClientSubjects(realNode.nodeName)))
      clients[identity] = await createLeaf(ca, { subject, usage: "client" });
  }
  const saKeys = await newKeys();
  return {
    realNode: realNode && {
      kubeletServing: await createLeaf(ca, {
        subject: `CN=system:node:${realNode.nodeName}, O=system:nodes`,
        usage: "server",
        ips: [realNode.nodeIp, "127.0.0.1"],
        dnsNames: [realNode.nodeName],
      }),
      apiserverKubeletClient: await createLeaf(ca, {
        subject: `CN=${nodeIdentities.apiserverKubeletClient}`,
        usage: "client",
      }),
    },
    ca: { certPem: ca.cert.toString("pem"), keyPem: await privateKeyPem(ca.keys.privateKey) },
    apiserver,
    etcd,
    clients,
    serviceAccount: {
      publicKeyPem: pem("PUBLIC KEY", await webcrypto.subtle.exportKey("spki", saKeys.publicKey)),
      privateKeyPem: await privateKeyPem(saKeys.privateKey),
    },
  };
}

/**
 * A CA of its own and a serving certificate it signed, for a server that pods reach by address
 * (a model file server on the node's bridge): clients trust `ca` alone, never the cluster's CA.
 */
export async function servingCertificate(options: {
  caName: string;
  ips?: string[];
  dnsNames?: string[];
}): Promise<{ ca: string } & KeyPair> {
  const ca = await createCa(options.caName);
  const leaf = await createLeaf(ca, {
    subject: `CN=${options.ips?.[0] ?? options.dnsNames?.[0] ?? options.caName}`,
    usage: "server",
    ips: options.ips,
    dnsNames: options.dnsNames,
  });
  return { ca: ca.cert.toString("pem"), ...leaf };
}
