/**
 * Each node of a multi-node cluster has an identity of its own, signed by the cluster CA that
 * `up` generated: kubelet's client certificate (`system:node:<name>`, so the Node authorizer
 * and NodeRestriction confine it to its own Node and pods) and kubelet's serving certificate
 * (the node's address in its SANs, so the API server verifies it when it calls the kubelet).
 * The kubeconfigs of the node's agents name the API server at the host's address on the node
 * network: a node's loopback is its own namespace's.
 */
import { readFile } from "node:fs/promises";
import { renderKubeconfig } from "../kubeconfig.ts";
import { type Ca, loadCa as caFromPem, createLeaf, type KeyPair, realNodeClientSubjects } from "../pki.ts";

/** The cluster CA from the files `up` wrote. */
export async function loadCa(certFile: string, keyFile: string): Promise<Ca> {
  return caFromPem(await readFile(certFile, "utf8"), await readFile(keyFile, "utf8"));
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
  const kubeletServing = await createLeaf(ca, {
    subject: `CN=system:node:${member.name}, O=system:nodes`,
    usage: "server",
    ips: [member.nodeIp],
    dnsNames: [member.name],
  });
  const client = await createLeaf(ca, {
    subject: realNodeClientSubjects(member.name).kubelet!,
    usage: "client",
  });
  return {
    kubeletServing,
    kubeletKubeconfig: renderKubeconfig({
      server,
      caPem: ca.cert.toString("pem"),
      certPem: client.certPem,
      keyPem: client.keyPem,
      user: `system:node:${member.name}`,
    }),
  };
}
