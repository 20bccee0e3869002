/**
 * Desired children of an MLModel: pure functions of the serving plan. They return only the
 * fields we own (server-side apply semantics): never status, never server defaults.
 */
import type {
  V1Affinity,
  V1Container,
  V1Deployment,
  V1EnvFromSource,
  V1EnvVar,
  V1Job,
  V1Lifecycle,
  V1PersistentVolumeClaim,
  V1PodDisruptionBudget,
  V1PodSecurityContext,
  V1PodSpec,
  V1PodTemplateSpec,
  V1Probe,
  V1Role,
  V1RoleBinding,
  V1Secret,
  V1SecurityContext,
  V1Service,
  V1ServiceAccount,
  V1Toleration,
  V1Volume,
  V1VolumeMount,
  V2HorizontalPodAutoscaler,
} from "@kubernetes/client-node";
import {
  credentialsDirEnv,
  credentialsSecretNameEnv,
  downloadCommand,
  downloaderRoleRule,
  exitCodes,
  modelNameEnv,
  modelNamespaceEnv,
  modelUriEnv,
  terminationLogPath,
} from "../downloader/contract.ts";
import { uriHasSecrets } from "../downloader/redact.ts";
import { cacheCopyCommand, cacheKeyLabel, downloadCacheFlags } from "../nodecache/contract.ts";
import { deepFreeze, type OwnerReference } from "../runtime/index.ts";
import { canonicalJson, childLabels, childNames, labels, servingSelector, shortHash } from "./names.ts";
import { defaults, type NodeCacheSource, type OperatorConfig, type ServingPlan } from "./plan.ts";

const volumeNames = {
  model: "model",
  scratch: "scratch",
  config: "model-config",
  credentials: "credentials",
  tmp: "tmp",
} as const;

function meta(
  plan: ServingPlan,
  owner: OwnerReference,
  name: string,
  component: Parameters<typeof childLabels>[1],
) {
  return {
    name,
    namespace: plan.namespace,
    labels: childLabels(plan.name, component),
    ownerReferences: [owner],
  };
}

// The `restricted` Pod Security level, met by every pod we create.
export function podSecurity(runAsUser: number): V1PodSecurityContext {
  return {
    runAsNonRoot: true,
    runAsUser,
    runAsGroup: runAsUser,
    fsGroup: runAsUser,
    seccompProfile: { type: "RuntimeDefault" },
  };
}

export const containerSecurity: V1SecurityContext = {
  allowPrivilegeEscalation: false,
  capabilities: { drop: ["ALL"] },
  runAsNonRoot: true,
};

function credentialVolume(plan: ServingPlan): {
  volumes: V1Volume[];
  mounts: V1VolumeMount[];
  envFrom: V1EnvFromSource[];
} {
  if (!plan.credentials) return { volumes: [], mounts: [], envFrom: [] };
  return {
    volumes: [{ name: volumeNames.credentials, secret: { secretName: plan.credentials.secretName } }],
    mounts: [{ name: volumeNames.credentials, mountPath: defaults.credentialsDir, readOnly: true }],
    envFrom: [{ secretRef: { name: plan.credentials.secretName } }],
  };
}

/** The claim the model is downloaded into; none for pvc:// (the user's) or no download. */
export function desiredStorage(
  plan: ServingPlan,
  owner: OwnerReference,
): V1PersistentVolumeClaim | undefined {
  return memoChild(plan, ["PersistentVolumeClaim", owner], () => storageOf(plan, owner));
}

/** Whether the plan's model lives in a claim of ours (a download in storage mode Claim). */
export function usesOwnClaim(plan: ServingPlan): boolean {
  return plan.source.type === "download" && !plan.source.nodeCache;
}

function storageOf(plan: ServingPlan, owner: OwnerReference): V1PersistentVolumeClaim | undefined {
  if (plan.source.type !== "download" || plan.source.nodeCache) return undefined;
  const storage = plan.spec.storage;
  return {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: meta(plan, owner, plan.source.claimName, "storage"),
    spec: {
      accessModes: [storage.accessMode],
      resources: { requests: { storage: String(storage.size) } },
      ...(storage.storageClassName ? { storageClassName: storage.storageClassName } : {}),
    },
  };
}

/**
 * The download Job's identity: a ServiceAccount of its own, a Role that allows only `patch` on
 * this model's `mlmodels/status` (the downloader server-side-applies its progress there), and
 * the RoleBinding between them. Owned by the MLModel, so they go with it. None when nothing is
 * downloaded. The serving pods never get this account (they mount no token at all).
 */
export function desiredDownloadIdentity(
  plan: ServingPlan,
  owner: OwnerReference,
): [V1ServiceAccount, V1Role, V1RoleBinding] | undefined {
  if (plan.source.type !== "download") return undefined;
  const name = childNames.downloader(plan.name);
  return [
    {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: meta(plan, owner, name, "download"),
      // Only the download pod mounts a token (its pod spec opts in).
      automountServiceAccountToken: false,
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: meta(plan, owner, name, "download"),
      rules: [downloaderRoleRule(plan.name)],
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: meta(plan, owner, name, "download"),
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name, namespace: plan.namespace }],
    },
  ];
}

type DownloadSource = Extract<ServingPlan["source"], { type: "download" }>;

/** The key of a URI Secret that holds the exact URI. */
export const uriSecretKey = "uri";
/** The type of a URI Secret: says what it is, and is the only type the operator creates. */
export const uriSecretType = "serving.mlmodel.dev/model-uri";

/**
 * How the download Job gets its exact URI: in its args when nothing in the URI is secret;
 * else from the URI Secret of the revision it downloads (env valueFrom secretKeyRef), so the
 * URI never shows in the Job, its pod, Events or logs. A recorded revision names its Secret;
 * the spec as written uses its own revision's.
 */
export function downloadUri(
  plan: ServingPlan,
  source: DownloadSource,
): { args: string } | { secret: string } {
  if (source.uriSecret) return { secret: source.uriSecret };
  const exact = source.exactUri ?? source.shownUri;
  if (!uriHasSecrets(exact)) return { args: exact };
  return { secret: childNames.uriSecret(plan.name, servingPodTemplate(plan).revision) };
}

/**
 * Whether the plan's exact URI must be kept in a URI Secret: the operator knows it (the spec as
 * written, or a revision an older operator recorded exact) and it has credentials in it. Cheap
 * (nothing hashed): every reconcile of every model asks it.
 */
export function needsUriSecret(plan: ServingPlan): boolean {
  const source = plan.source;
  return source.type === "download" && source.exactUri !== undefined && uriHasSecrets(source.exactUri);
}

/**
 * The Secret holding the exact URI, when the Job reads it from one and the operator knows it
 * (the spec as written, or a revision recorded before URIs were redacted). Immutable: its name
 * is its revision's, which hashes the content. `owner`: that revision's ControllerRevision.
 */
export function desiredUriSecret(plan: ServingPlan, owner: OwnerReference): V1Secret | undefined {
  const source = plan.source;
  if (source.type !== "download" || source.exactUri === undefined) return undefined;
  const where = downloadUri(plan, source);
  if (!("secret" in where)) return undefined;
  return {
    apiVersion: "v1",
    kind: "Secret",
    type: uriSecretType,
    immutable: true,
    metadata: {
      name: where.secret,
      namespace: plan.namespace,
      labels: childLabels(plan.name, "model-uri"),
      ownerReferences: [owner],
    },
    data: { [uriSecretKey]: Buffer.from(source.exactUri).toString("base64") },
  };
}

/** The Job that runs `mlmodel download` into the claim; none when nothing is downloaded. */
export function desiredDownloadJob(
  plan: ServingPlan,
  owner: OwnerReference,
  config: OperatorConfig,
): V1Job | undefined {
  return memoChild(plan, ["Job", owner, config], () => downloadJobOf(plan, owner, config));
}

function downloadJobOf(plan: ServingPlan, owner: OwnerReference, config: OperatorConfig): V1Job | undefined {
  const source = plan.source;
  if (source.type !== "download") return undefined;
  const creds = credentialVolume(plan);
  const uri = downloadUri(plan, source);
  const cache = source.nodeCache;
  const args = [
    ...("args" in uri ? ["--uri", uri.args] : ["--uri-from-env", modelUriEnv]),
    "--dest",
    cache ? scratchDest(plan, source) : source.dest,
    ...(source.sha256 ? ["--sha256", source.sha256] : []),
    ...(cache ? [downloadCacheFlags.url, cache.url, downloadCacheFlags.key, cache.key] : []),
  ];
  const env: V1EnvVar[] = [
    ...("secret" in uri
      ? [{ name: modelUriEnv, valueFrom: { secretKeyRef: { name: uri.secret, key: uriSecretKey } } }]
      : []),
    // Progress goes into this MLModel's status.download (see docs/downloader.md, "Progress").
    { name: modelNameEnv, value: plan.name },
    { name: modelNamespaceEnv, value: plan.namespace },
    { name: credentialsDirEnv, value: defaults.credentialsDir },
    ...(plan.credentials ? [{ name: credentialsSecretNameEnv, value: plan.credentials.secretName }] : []),
  ];
  const podLabels = childLabels(plan.name, "download");
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: meta(plan, owner, source.jobName, "download"),
    spec: {
      backoffLimit: defaults.downloadBackoffLimit,
      // The whole download, retries and pod restarts included: a store that keeps the
      // downloader busy without progress cannot hold the model in Downloading for ever.
      activeDeadlineSeconds: plan.spec.model.downloadDeadlineSeconds,
      // The downloader retries transient errors itself and exits 1 (failed) or 2 (bad flags)
      // only with a final verdict (written to its termination message), so either fails the Job
      // at once instead of after minutes of pod back-off; other exits (OOM kill, eviction) use
      // the backoff limit.
      podFailurePolicy: {
        rules: [
          {
            action: "FailJob",
            onExitCodes: {
              containerName: "download",
              operator: "In",
              values: [exitCodes.failed, exitCodes.usage],
            },
          },
        ],
      },
      template: {
        metadata: { labels: podLabels },
        spec: {
          restartPolicy: "Never",
          // Its own account (desiredDownloadIdentity), whose token may patch only this model's
          // status: the one pod of ours that mounts a token.
          serviceAccountName: childNames.downloader(plan.name),
          automountServiceAccountToken: true,
          securityContext: podSecurity(defaults.runAsUser),
          containers: [
            {
              name: "download",
              image: config.downloaderImage,
              command: [...downloadCommand],
              args,
              env,
              envFrom: creds.envFrom,
              // The downloader writes one actionable line here on failure; logs are the fallback.
              terminationMessagePath: terminationLogPath,
              terminationMessagePolicy: "FallbackToLogsOnError",
              securityContext: { ...containerSecurity, readOnlyRootFilesystem: true },
              volumeMounts: [
                cache
                  ? { name: volumeNames.scratch, mountPath: defaults.scratchMountPath }
                  : { name: volumeNames.model, mountPath: plan.mountPath },
                { name: volumeNames.tmp, mountPath: "/tmp" },
                ...creds.mounts,
              ],
            },
          ],
          volumes: [
            // In NodeCache mode the download lands in scratch space and is uploaded to the
            // node's agent; the pod's disk use is bounded like a serving pod's copy.
            cache
              ? { name: volumeNames.scratch, emptyDir: { sizeLimit: String(plan.spec.storage.size) } }
              : { name: volumeNames.model, persistentVolumeClaim: { claimName: source.claimName } },
            { name: volumeNames.tmp, emptyDir: {} },
            ...creds.volumes,
          ],
        },
      },
    },
  };
}

/**
 * Where a NodeCache download writes: the same layout under the scratch mount as the serving
 * pods' copy under the model mount, so the entry's files are the model directory's.
 */
function scratchDest(plan: ServingPlan, source: DownloadSource): string {
  return `${defaults.scratchMountPath}${source.dest.slice(plan.mountPath.length)}`;
}

function probeHandler(plan: ServingPlan): Pick<V1Probe, "httpGet" | "tcpSocket"> {
  if (plan.readinessPath && plan.restPort) return { httpGet: { path: plan.readinessPath, port: "rest" } };
  return { tcpSocket: { port: plan.restPort ? "rest" : "grpc" } };
}

function resources(plan: ServingPlan): V1Container["resources"] {
  const r = plan.spec.resources;
  const requests: Record<string, string> = {};
  const limits: Record<string, string> = {};
  const cpu = r?.cpu ?? plan.runtime.spec?.resources?.cpu;
  const memory = r?.memory ?? plan.runtime.spec?.resources?.memory;
  if (cpu !== undefined) requests.cpu = String(cpu);
  if (memory !== undefined) requests.memory = String(memory);
  if (r?.limits?.cpu !== undefined) limits.cpu = String(r.limits.cpu);
  if (r?.limits?.memory !== undefined) limits.memory = String(r.limits.memory);
  if (r?.gpu) {
    // Extended resources must have requests equal to limits.
    requests["nvidia.com/gpu"] = String(r.gpu);
    limits["nvidia.com/gpu"] = String(r.gpu);
  }
  return {
    ...(Object.keys(requests).length ? { requests } : {}),
    ...(Object.keys(limits).length ? { limits } : {}),
  };
}

function modelVolume(plan: ServingPlan): { volumes: V1Volume[]; mounts: V1VolumeMount[] } {
  const source = plan.source;
  if (source.type === "none") return { volumes: [], mounts: [] };
  if (source.type === "download" && source.nodeCache) {
    // The pod's own copy, filled by the cache-copy init container from its node's agent.
    return {
      volumes: [{ name: volumeNames.model, emptyDir: { sizeLimit: String(plan.spec.storage.size) } }],
      mounts: [{ name: volumeNames.model, mountPath: plan.mountPath, readOnly: true }],
    };
  }
  return {
    volumes: [
      { name: volumeNames.model, persistentVolumeClaim: { claimName: source.claimName, readOnly: true } },
    ],
    mounts: [
      {
        name: volumeNames.model,
        mountPath: plan.mountPath,
        readOnly: true,
        ...(source.type === "pvc" && source.subPath ? { subPath: source.subPath } : {}),
      },
    ],
  };
}

export const cacheCopyContainerName = "cache-copy";

/**
 * The init container of a NodeCache serving pod: `mlmodel cache-copy` asks its node's agent
 * for the version (a peer copy when the node lacks it), then copies it into the pod's model
 * volume, checking every file's sha256. So the version is on the node and verified before the
 * server starts, and no serving pod fetches from the origin.
 */
export function cacheCopyContainer(plan: ServingPlan, cache: NodeCacheSource, dest: string): V1Container {
  return {
    name: cacheCopyContainerName,
    image: cache.image,
    command: [...cacheCopyCommand],
    args: ["--cache", cache.url, "--key", cache.key, "--dest", dest],
    resources: structuredClone(defaults.cacheCopyResources) as V1Container["resources"],
    terminationMessagePath: terminationLogPath,
    terminationMessagePolicy: "FallbackToLogsOnError",
    securityContext: { ...containerSecurity, readOnlyRootFilesystem: true },
    volumeMounts: [{ name: volumeNames.model, mountPath: plan.mountPath }],
  };
}

/** The taints a node gets when it stops answering: its pods are evicted once they stop tolerating them. */
const nodeLossTaints = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] as const;

/**
 * The user's tolerations and, for a NodeCache model, a short tolerance of a lost node (taints
 * the user tolerates themselves are left to them): its replicas are replaced on other nodes,
 * whose agents hold the model or copy it from a peer, instead of after Kubernetes' 300 s.
 */
export function tolerationsOf(
  user: readonly V1Toleration[],
  nodeCache: boolean,
): Pick<V1PodSpec, "tolerations"> {
  const own = nodeCache
    ? nodeLossTaints
        .filter((key) => !user.some((t) => t.key === key || (t.key === undefined && t.operator === "Exists")))
        .map((key) => ({
          key,
          operator: "Exists",
          effect: "NoExecute",
          tolerationSeconds: defaults.nodeLossTolerationSeconds,
        }))
    : [];
  const all = [...user, ...own];
  return all.length ? { tolerations: all } : {};
}

/**
 * Replicas of a NodeCache model spread over nodes and zones by default: the model is on every
 * node that serves it, so nothing ties them to one node, and a node's loss should take as few
 * as it can. Over nodes, a spread constraint (maxSkew 1, ScheduleAnyway: a one-node cluster
 * still runs every replica). Over zones, a preferred anti-affinity, not a second constraint:
 * the scheduler scores a soft spread only on nodes that carry every key of it, so on a cluster
 * whose nodes have no zone label (bare metal, kind, kwok) a zone constraint would switch the
 * node spread off too; a preference simply does nothing there.
 */
export function defaultSpread(plan: ServingPlan): Pick<V1PodSpec, "topologySpreadConstraints" | "affinity"> {
  const selector = { matchLabels: servingSelector(plan.name) };
  return {
    topologySpreadConstraints: [
      {
        maxSkew: 1,
        topologyKey: defaults.spread.nodeKey,
        whenUnsatisfiable: "ScheduleAnyway",
        labelSelector: selector,
        // Each revision spreads on its own: a rollout's new pods are placed as a set.
        matchLabelKeys: [labels.revision],
      },
    ],
    affinity: {
      podAntiAffinity: {
        preferredDuringSchedulingIgnoredDuringExecution: [
          {
            weight: defaults.spread.zoneWeight,
            podAffinityTerm: { topologyKey: defaults.spread.zoneKey, labelSelector: selector },
          },
        ],
      },
    },
  };
}

/**
 * The desired children of each plan, made once per plan and further inputs (the owner, the
 * replicas, the operator's settings) and deep-frozen: a reconcile whose plan did not change
 * (plan.ts, `planned`) gets the very objects the last one applied, whose hashes are memoized
 * on them (drift.ts, withAppliedHash). They live as long as their plan.
 */
const childrenOfPlan = new WeakMap<ServingPlan, Map<string, unknown>>();

function memoChild<T>(plan: ServingPlan, inputs: readonly unknown[], make: () => T): T {
  if (!Object.isFrozen(plan)) return make();
  let children = childrenOfPlan.get(plan);
  if (!children) {
    children = new Map();
    childrenOfPlan.set(plan, children);
  }
  const key = canonicalJson(inputs);
  if (children.has(key)) return children.get(key) as T;
  const child = deepFreeze(make()) as T;
  children.set(key, child);
  return child;
}

/**
 * The revision of each plan, worked out once: a reconcile asks for it three times (decide,
 * the Deployment, the status), and hashing the pod spec is most of the cost. Keyed on the plan
 * object, which nothing changes once planned (a new spec, runtime or revision is a new plan).
 */
const revisionOfPlan = new WeakMap<ServingPlan, string>();

/**
 * The preStop drain of a runtime's image, as a POSIX shell script: it polls the pod's count of
 * accepted TCP connections (PassiveOpens in /proc/net/snmp, which is the pod's own network
 * namespace) once a second and returns once the count has not moved for `quietSeconds`, i.e. once
 * the Service's endpoints and kube-proxy's rules no longer send new connections here, however
 * long that took on a busy node; `maxSeconds` bounds it inside the grace period. It needs only
 * a shell, `sleep` and a readable /proc, and drains for a fixed `fallbackSeconds` if the count
 * cannot be read. Connections a client keeps open are not counted: the server's own graceful
 * shutdown finishes their requests after SIGTERM.
 */
export function drainScript(quietSeconds: number, maxSeconds: number, fallbackSeconds: number): string {
  return [
    "quiet=0; waited=0; last=",
    `while [ "$waited" -lt ${maxSeconds} ]; do`,
    "  opens=",
    '  while read -r key a b c d e f rest; do [ "$key" = Tcp: ] && opens=$f; done < /proc/net/snmp',
    `  case "$opens" in ''|*[!0-9]*) sleep ${fallbackSeconds}; exit 0;; esac`,
    '  if [ "$opens" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0; last=$opens; fi',
    `  [ "$quiet" -ge ${quietSeconds} ] && exit 0`,
    "  sleep 1; waited=$((waited + 1))",
    "done",
  ].join("\n");
}

/**
 * How the serving container stops: a runtime's image (each built-in one has /bin/sh) drains until
 * no new connection arrives (drainScript); a custom image may have no shell, so it gets the
 * kubelet's own sleep action, a fixed margin.
 */
function drainHook(plan: ServingPlan): V1Lifecycle {
  if (!plan.runtime.spec) return { preStop: { sleep: { seconds: defaults.drainSeconds } } };
  const script = drainScript(defaults.drainQuietSeconds, defaults.drainMaxSeconds, defaults.drainSeconds);
  return { preStop: { exec: { command: ["/bin/sh", "-c", script] } } };
}

/** The serving pod template; its hash is the model's serving revision. */
export function servingPodTemplate(plan: ServingPlan): { revision: string; template: V1PodTemplateSpec } {
  const model = modelVolume(plan);
  const creds = credentialVolume(plan);
  const configVolumes: V1Volume[] = plan.configFile
    ? [
        {
          name: volumeNames.config,
          configMap: {
            name: plan.configFile.configMapName,
            items: [{ key: plan.configFile.key, path: plan.configFile.key }],
          },
        },
      ]
    : [];
  const configMounts: V1VolumeMount[] = plan.configFile
    ? [{ name: volumeNames.config, mountPath: defaults.configMountDir, readOnly: true }]
    : [];
  const ports = [
    ...(plan.restPort ? [{ name: "rest", containerPort: plan.restPort, protocol: "TCP" }] : []),
    ...(plan.grpcPort ? [{ name: "grpc", containerPort: plan.grpcPort, protocol: "TCP" }] : []),
  ];
  const handler = probeHandler(plan);
  const period = defaults.probePeriodSeconds;
  const container: V1Container = {
    name: "server",
    image: plan.image,
    ...(plan.command.length ? { command: plan.command } : {}),
    ...(plan.args.length ? { args: plan.args } : {}),
    env: plan.env,
    ...(creds.envFrom.length ? { envFrom: creds.envFrom } : {}),
    ports,
    // The startup probe gives a large model startupTimeoutSeconds to load before the kubelet
    // restarts it; the readiness probe then keeps traffic away from a replica that stops answering.
    startupProbe: {
      ...handler,
      periodSeconds: period,
      failureThreshold: Math.ceil(plan.startupTimeoutSeconds / period),
    },
    readinessProbe: { ...handler, periodSeconds: 5, failureThreshold: 3 },
    // Endpoint removal and SIGTERM race: keep serving while the Service forgets this pod.
    lifecycle: drainHook(plan),
    resources: resources(plan),
    terminationMessagePolicy: "FallbackToLogsOnError",
    securityContext: containerSecurity,
    volumeMounts: [...model.mounts, ...configMounts, ...creds.mounts],
  };
  const placement = plan.spec.placement;
  const cache = plan.source.type === "download" ? plan.source.nodeCache : undefined;
  const spec: V1PodSpec = {
    automountServiceAccountToken: false,
    terminationGracePeriodSeconds: defaults.terminationGracePeriodSeconds,
    ...(plan.spec.serviceAccountName ? { serviceAccountName: plan.spec.serviceAccountName } : {}),
    securityContext: podSecurity(plan.runAsUser),
    ...(cache && plan.source.type === "download"
      ? { initContainers: [cacheCopyContainer(plan, cache, plan.source.dest)] }
      : {}),
    containers: [container],
    volumes: [...model.volumes, ...configVolumes, ...creds.volumes],
    ...(placement?.nodeSelector ? { nodeSelector: placement.nodeSelector } : {}),
    ...tolerationsOf(placement?.tolerations ?? [], cache !== undefined),
    ...(placement?.affinity ? { affinity: placement.affinity as V1Affinity } : {}),
    ...(cache && !placement ? defaultSpread(plan) : {}),
  };
  let revision = revisionOfPlan.get(plan);
  if (revision === undefined) {
    revision = shortHash(spec);
    revisionOfPlan.set(plan, revision);
  }
  return {
    revision,
    template: {
      metadata: {
        labels: {
          ...childLabels(plan.name, "server"),
          [labels.revision]: revision,
          // The node's agent never evicts a version a pod on its node serves.
          ...(cache ? { [cacheKeyLabel]: cache.key } : {}),
        },
      },
      spec,
    },
  };
}

/** What the cluster holds now, where the desired Deployment depends on it. */
export interface LiveScaling {
  deployment?: V1Deployment;
  autoscaler?: Pick<V2HorizontalPodAutoscaler, "status">;
}

/**
 * spec.replicas while autoscaling is on. Server-side apply deletes a field its only owner stops
 * applying, so leaving replicas out the moment autoscaling is switched on would reset the
 * Deployment to 1 replica until the autoscaler's next sync (up to 15 s) raised it again. So
 * until the autoscaler has scaled once (then it owns the field and we leave it alone), the
 * operator keeps the current count within the new bounds; a new Deployment starts at
 * minReplicas. Sharp edge: a reconcile that runs on a cache older than the autoscaler's first
 * scale writes the old count once; the autoscaler corrects it at its next sync.
 */
export function replicasUntilAutoscaled(plan: ServingPlan, live: LiveScaling): number | undefined {
  const bounds = plan.spec.autoscaling;
  if (!bounds || live.autoscaler?.status?.lastScaleTime) return undefined;
  const min = bounds.minReplicas ?? defaults.replicas;
  const current = live.deployment?.spec?.replicas ?? min;
  return Math.min(Math.max(current, min), bounds.maxReplicas);
}

export function desiredDeployment(
  plan: ServingPlan,
  owner: OwnerReference,
  live: LiveScaling = {},
): V1Deployment {
  const replicas = plan.replicas ?? replicasUntilAutoscaled(plan, live);
  return memoChild(plan, ["Deployment", owner, replicas ?? null], () => deploymentOf(plan, owner, replicas));
}

function deploymentOf(plan: ServingPlan, owner: OwnerReference, replicas: number | undefined): V1Deployment {
  const { template } = servingPodTemplate(plan);
  const { rollout } = plan.spec;
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: meta(plan, owner, childNames.deployment(plan.name), "server"),
    spec: {
      // With autoscaling, replicas is left to the HorizontalPodAutoscaler once it has scaled.
      ...(replicas !== undefined ? { replicas } : {}),
      selector: { matchLabels: servingSelector(plan.name) },
      strategy: {
        type: "RollingUpdate",
        rollingUpdate: { maxUnavailable: rollout.maxUnavailable, maxSurge: rollout.maxSurge },
      },
      progressDeadlineSeconds: rollout.progressDeadlineSeconds,
      template,
    },
  };
}

export function desiredService(plan: ServingPlan, owner: OwnerReference): V1Service {
  return memoChild(plan, ["Service", owner], () => serviceOf(plan, owner));
}

function serviceOf(plan: ServingPlan, owner: OwnerReference): V1Service {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: meta(plan, owner, childNames.service(plan.name), "server"),
    spec: {
      type: plan.spec.endpoint.serviceType,
      selector: servingSelector(plan.name),
      ports: [
        ...(plan.restPort
          ? [{ name: "rest", port: plan.restPort, targetPort: "rest", protocol: "TCP", appProtocol: "http" }]
          : []),
        ...(plan.grpcPort
          ? [{ name: "grpc", port: plan.grpcPort, targetPort: "grpc", protocol: "TCP", appProtocol: "grpc" }]
          : []),
      ],
    },
  } as V1Service;
}

export function desiredAutoscaler(
  plan: ServingPlan,
  owner: OwnerReference,
): V2HorizontalPodAutoscaler | undefined {
  const a = plan.spec.autoscaling;
  // minReplicas 0 is scaled to zero (plan.replicas 0), which the autoscaler cannot express.
  if (!a || plan.replicas !== undefined) return undefined;
  return {
    apiVersion: "autoscaling/v2",
    kind: "HorizontalPodAutoscaler",
    metadata: meta(plan, owner, childNames.autoscaler(plan.name), "autoscaler"),
    spec: {
      scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name: childNames.deployment(plan.name) },
      minReplicas: a.minReplicas,
      maxReplicas: a.maxReplicas,
      metrics: [
        {
          type: "Resource",
          resource: {
            name: "cpu",
            target: { type: "Utilization", averageUtilization: a.targetCPUUtilizationPercentage },
          },
        },
      ],
    },
  };
}

/**
 * With more than one replica promised, voluntary disruptions (node drains) may take down at
 * most one serving pod at a time; with one or none a budget would only block drains.
 */
export function desiredDisruptionBudget(
  plan: ServingPlan,
  owner: OwnerReference,
): V1PodDisruptionBudget | undefined {
  const promised = plan.replicas ?? plan.spec.autoscaling?.minReplicas ?? defaults.replicas;
  if (promised <= 1) return undefined;
  return {
    apiVersion: "policy/v1",
    kind: "PodDisruptionBudget",
    metadata: meta(plan, owner, childNames.disruptionBudget(plan.name), "disruption-budget"),
    spec: { maxUnavailable: 1, selector: { matchLabels: servingSelector(plan.name) } },
  };
}
