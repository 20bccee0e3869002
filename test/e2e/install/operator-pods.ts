/**
 * What the e2e tests of the operator run as pods share (upgrade.test.ts, ha-nodes.test.ts): its
 * manager pods, its Lease, the API server's audit log read by pod, the chart's values for a
 * release that watches only the test's namespaces, and a copy of the chart as the next version.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { parseAllDocuments, parseDocument } from "yaml";
import { clusterServingRuntimeKind } from "../../../src/api/kinds.ts";
import { ensureBinaries } from "../../../src/cluster/index.ts";
import { leaseName } from "../../../src/operator/run.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { caSecretName } from "../realnode/fixture.ts";
import { ensureHelm } from "./helm.ts";
import { type CommandResult, repoRoot } from "./support.ts";

export const chartDir = join(repoRoot, "deploy/helm/mlmodel-operator");
export const managerPods = "app.kubernetes.io/name=mlmodel-operator,app.kubernetes.io/component=manager";
const podNameKey = "authentication.kubernetes.io/pod-name";

const isReady = (p: V1Pod) =>
  !p.metadata?.deletionTimestamp &&
  p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True");

/** The manager pods of `ns` that are not being deleted. */
export async function livePods(admin: KubeClient, ns: string): Promise<V1Pod[]> {
  const pods = (await admin.list(builtinKinds.Pod, { namespace: ns, labelSelector: managerPods }))
    .items as unknown as V1Pod[];
  return pods.filter((p) => !p.metadata?.deletionTimestamp);
}

/** Waits until `replicas` manager pods (each passing `also`), and only they, are Ready in `ns`. */
export async function readyManagers(
  admin: KubeClient,
  ns: string,
  replicas: number,
  also: (pod: V1Pod) => boolean = () => true,
): Promise<V1Pod[]> {
  return waitFor(
    `${replicas} Ready operator pods in ${ns}`,
    async () => {
      const live = await livePods(admin, ns);
      return live.length === replicas && live.every((p) => isReady(p) && also(p)) ? live : undefined;
    },
    { timeoutMs: 300_000, intervalMs: 500 },
  );
}

export interface LeaseObject extends KubeObject {
  spec: { holderIdentity: string; leaseDurationSeconds: number; acquireTime: string; renewTime: string };
}

/** The operator's Lease; with `held`, once it has a holder (a released Lease has none). */
export async function readLease(admin: KubeClient, namespace: string, held = true): Promise<LeaseObject> {
  return waitFor(`Lease ${namespace}/${leaseName}${held ? " to have a holder" : ""}`, async () => {
    const l = await admin.get<LeaseObject>(builtinKinds.Lease, { namespace, name: leaseName });
    return l?.spec && (!held || l.spec.holderIdentity) ? l : undefined;
  });
}

/** The elector's identity is `<HOSTNAME>_<random>`; in a pod, HOSTNAME is the pod's name. */
export function podOfIdentity(identity: string): string {
  return identity.slice(0, identity.lastIndexOf("_"));
}

export interface AuditEvent {
  verb: string;
  user: { username: string; extra?: Record<string, string[]> };
  objectRef?: { resource?: string; namespace?: string; name?: string; subresource?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp: string;
  /** When the event's stage (ResponseComplete for a finished request) was reached. */
  stageTimestamp?: string;
}

/** The API server's audit log (writes only, see src/cluster/cluster.ts's policy). */
export function auditEvents(log: string): AuditEvent[] {
  return readFileSync(log, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as AuditEvent);
}

/** The pod whose bound token made the request (undefined for other credentials). */
export const podOf = (e: AuditEvent) => e.user.extra?.[podNameKey]?.[0];
export const succeeded = (e: AuditEvent) => (e.responseStatus?.code ?? 0) < 300;
export const at = (e: AuditEvent) => Date.parse(e.requestReceivedTimestamp);

/** `helm install|upgrade` arguments for a release running `image`, watching only `watch`. */
export function releaseValues(image: string, watch: string[]): string[] {
  const [repository, tag] = image.split(/:(?=[^:/]+$)/);
  return [
    "--set",
    `image.repository=${repository}`,
    "--set",
    `image.tag=${tag}`,
    // The cluster-wide runtimes are shared with the run's other files: applyBuiltinRuntimes.
    "--set",
    "builtinRuntimes.enabled=false",
    "--set",
    `watchNamespaces={${watch.join(",")}}`,
  ];
}

/** The built-in runtimes, as the second step of a kubectl install applies them. */
export async function applyBuiltinRuntimes(admin: KubeClient): Promise<void> {
  const runtimes = parseAllDocuments(
    readFileSync(join(repoRoot, "deploy/kustomize/runtimes/runtimes.yaml"), "utf8"),
  ).map((doc) => doc.toJS() as KubeObject);
  await waitFor("the ClusterServingRuntime CRD to be served", async () => {
    try {
      await admin.list(clusterServingRuntimeKind, { limit: 1 });
      return true;
    } catch {
      return false;
    }
  });
  for (const runtime of runtimes) {
    await admin.apply(clusterServingRuntimeKind, runtime, { fieldManager: "mlmodel-install", force: true });
  }
}

/** The model file server's CA as the Secret sklearnModel's credentialsSecretRef names. */
export async function applyFilesCa(admin: KubeClient, namespace: string, ca: string): Promise<void> {
  await admin.apply(
    builtinKinds.Secret,
    {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: caSecretName, namespace },
      stringData: { "ca.crt": ca },
    },
    { fieldManager: "e2e", force: true },
  );
}

/**
 * The chart as its next version would ship: a copy with `appVersion` (so its default image tag)
 * and `version` changed, and an optional string field `spec.<field>` added to the MLModel CRD of
 * every served version. Returns the copy's directory.
 */
export function nextChartVersion(options: { version: string; appVersion: string; field: string }): string {
  const dir = join(scratchDir("chart-next"), "mlmodel-operator");
  cpSync(chartDir, dir, { recursive: true });
  const chartFile = join(dir, "Chart.yaml");
  const chart = parseDocument(readFileSync(chartFile, "utf8"));
  chart.set("version", options.version);
  chart.set("appVersion", options.appVersion);
  writeFileSync(chartFile, chart.toString());
  const crdFile = join(dir, "crds/mlmodels.serving.mlmodel.dev.yaml");
  const crd = parseDocument(readFileSync(crdFile, "utf8"));
  const versions = crd.getIn(["spec", "versions"]) as { items: unknown[] };
  assert.ok(versions.items.length > 0, "the MLModel CRD has versions");
  for (const index of versions.items.keys()) {
    crd.setIn(
      [
        "spec",
        "versions",
        index,
        "schema",
        "openAPIV3Schema",
        "properties",
        "spec",
        "properties",
        options.field,
      ],
      crd.createNode({ type: "string", description: "Free text for people; the operator ignores it." }),
    );
  }
  writeFileSync(crdFile, crd.toString());
  return dir;
}

/**
 * Runs a command without blocking this process: a test that sends live traffic from this
 * process must keep its event loop free (spawnSync would stop the traffic while helm waits).
 */
export function runCommand(bin: string, args: string[]): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout, stderr }));
  });
}

export const helmAsync = (args: string[]) => runCommand(ensureHelm(), args);

/** The cached kubectl, without blocking (see runCommand). */
export async function kubectlAsync(kubeconfig: string, args: string[]): Promise<CommandResult> {
  return runCommand((await ensureBinaries()).kubectl, ["--kubeconfig", kubeconfig, ...args]);
}
