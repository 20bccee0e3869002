/**
 * What the `restricted` Pod Security level refuses in a pod spec (the checks of
 * https://kubernetes.io/docs/concepts/security/pod-security-standards/ that a spec can fail):
 * each violation in words, none when the pod passes.
 */
import type { V1Container, V1PodSpec } from "@kubernetes/client-node";

const allowedVolumeSources = [
  "configMap",
  "csi",
  "downwardAPI",
  "emptyDir",
  "ephemeral",
  "persistentVolumeClaim",
  "projected",
  "secret",
];

export function restrictedViolations(spec: V1PodSpec): string[] {
  const out: string[] = [];
  const pod = spec.securityContext ?? {};
  if (spec.hostNetwork || spec.hostPID || spec.hostIPC) out.push("host namespaces");
  for (const v of spec.volumes ?? []) {
    const kinds = Object.keys(v).filter((k) => k !== "name");
    for (const k of kinds) if (!allowedVolumeSources.includes(k)) out.push(`volume ${v.name} is ${k}`);
  }
  const containers: V1Container[] = [...(spec.initContainers ?? []), ...spec.containers];
  for (const c of containers) {
    const sc = c.securityContext ?? {};
    if (sc.privileged) out.push(`${c.name}: privileged`);
    if (sc.allowPrivilegeEscalation !== false) out.push(`${c.name}: allowPrivilegeEscalation not false`);
    if (!sc.capabilities?.drop?.includes("ALL")) out.push(`${c.name}: capabilities not dropped`);
    const added = sc.capabilities?.add?.filter((a) => a !== "NET_BIND_SERVICE") ?? [];
    if (added.length) out.push(`${c.name}: adds ${added.join(",")}`);
    if (sc.runAsNonRoot !== true && pod.runAsNonRoot !== true) out.push(`${c.name}: may run as root`);
    if (sc.runAsUser === 0 || pod.runAsUser === 0) out.push(`${c.name}: runs as uid 0`);
    const seccomp = sc.seccompProfile?.type ?? pod.seccompProfile?.type;
    if (seccomp !== "RuntimeDefault" && seccomp !== "Localhost") out.push(`${c.name}: no seccomp profile`);
    for (const p of c.ports ?? []) if (p.hostPort) out.push(`${c.name}: hostPort ${p.hostPort}`);
  }
  return out;
}
