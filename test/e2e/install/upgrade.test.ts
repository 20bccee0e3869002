// test-needs: own-real-node, images, helm
/**
 * Upgrading the operator while a model serves, and rolling the upgrade back: a Helm release of
 * the operator (two replicas, pods of the project image on the real node) goes from version A
 * to version B by `helm upgrade`, back to A by `helm rollback`, while the MLServer sample answers
 * 25 requests/s through its Service.
 *
 * A and B are two builds of the project image (test/harness/operator-build.ts: B is A's layers
 * with MLMODEL_BUILD=b in its config, tagged `<tag>-b`), and two versions of the chart: B's is a
 * copy with appVersion `<tag>-b` and an optional field added to the MLModel CRD. What must hold
 * at each step: no request fails, the model's pods are the same pods (UIDs, restart counts) of
 * the same Deployment template (generation, pod-template-hash), the operator writes nothing to
 * the model's Deployments, every operator pod reports the build it runs
 * (mlmodel_operator_build_info), and an object written under the other version is still valid.
 *
 * Helm never upgrades a chart's crds/; the chart's templates/crds-upgrade.yaml renders them on
 * upgrades (the first one adopts them: --take-ownership). The rollback returns to the install's
 * revision, whose manifest has no CRDs: Helm keeps them (resource-policy keep), so B's schema
 * stays served under A and the CRDs stay the release's. A `helm upgrade` to A's chart with the
 * same values then serves A's schema, rolling no pod (docs/install.md, "Rolling back with Helm").
 *
 * The file starts a real-node cluster of its own (own-real-node): the CRDs it changes are the
 * cluster's, and a file sharing the run's cluster that applies the repository's CRDs meanwhile
 * would change the schema under its checks (and its schema under theirs).
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { loadImage } from "../../../src/cluster/index.ts";
import { recipeFor } from "../../../src/images/index.ts";
import {
  inferV2,
  type ModelFileServer,
  type SampleModel,
  type ServiceEndpoint,
  serviceEndpoint,
  startModelFileServer,
  trainSampleModel,
} from "../../../src/images/sample-model.ts";
import { buildInfoMetric } from "../../../src/operator/build-info.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import {
  createNamespace,
  kubeConfig,
  localCluster,
  type TestNamespace,
  waitFor,
} from "../../harness/cluster.ts";
import { type OperatorBuild, operatorImageBuild } from "../../harness/operator-build.ts";
import {
  type RealNodeCluster,
  startOwnRealNodes,
  stopOwnRealNodes,
  useRealNodeCluster,
} from "../../harness/realnode.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { Traffic, versionClassifier } from "../../harness/traffic.ts";
import { adminClient, podsOf, waitForPhase } from "../operator/helpers.ts";
import { firstAnswer, sklearnModel } from "../realnode/fixture.ts";
import {
  assertNoFailures,
  burnersForTraffic,
  holdNodeForTraffic,
  liveTrafficHook,
  liveTrafficSuiteTimeoutMs,
  moreAnswers,
} from "../realnode/live-traffic.ts";
import { helm } from "./helm.ts";
import {
  applyBuiltinRuntimes,
  applyFilesCa,
  at,
  auditEvents,
  chartDir,
  helmAsync,
  kubectlAsync,
  livePods,
  nextChartVersion,
  podOfIdentity,
  readLease,
  readyManagers,
  releaseValues,
  succeeded,
} from "./operator-pods.ts";

const ratePerSecond = 25;
const maxDurationMs = 20 * 60_000;
const release = "up";
const fullname = `${release}-mlmodel-operator`;
/** The field chart B adds to the MLModel CRD. */
const newField = "notes";

describe("upgrading the operator A -> B by helm upgrade and back by helm rollback under live traffic", {
  timeout: liveTrafficSuiteTimeoutMs,
}, () => {
  let cluster: RealNodeCluster;
  let admin: KubeClient;
  let files: ModelFileServer;
  let operatorNs: TestNamespace;
  let modelsNs: TestNamespace;
  /** Neither operator watches it: its MLModels are only stored, for the schema checks. */
  let storedNs: TestNamespace;
  let releaseNode: (() => Promise<void>) | undefined;
  let sample: SampleModel & { uri: string };
  let endpoint: ServiceEndpoint;
  let traffic: Traffic<Awaited<ReturnType<typeof inferV2>>>;
  let burners: ReturnType<typeof burnersForTraffic>;
  let imageA: string;
  let imageB: OperatorBuild;
  let chartB: string;
  const scratch = scratchDir("upgrade");
  const clusterDir = scratchDir("upgrade-cluster");
  const figures: string[] = [];

  const user = () => `system:serviceaccount:${operatorNs.name}:${fullname}`;
  const releaseArgs = () => ["--kubeconfig", cluster.kubeconfig, "-n", operatorNs.name];
  /** `helm upgrade` of the release to `chart` running `image`. */
  const upgradeTo = (chart: string, image: string, extra: string[] = []) => [
    "upgrade",
    release,
    chart,
    ...releaseArgs(),
    ...releaseValues(image, [modelsNs.name]),
    ...extra,
  ];
  /** `helm rollback` of the release to its previous revision, as a user runs it. */
  const rollback = () => ["rollback", release, ...releaseArgs()];

  before(async () => {
    await startOwnRealNodes(clusterDir, 1, (line) => console.log(`# [cluster] ${line}`));
    cluster = await useRealNodeCluster();
    admin = await adminClient();
    releaseNode = await holdNodeForTraffic(cluster, "upgrade.test.ts");
    operatorNs = await createNamespace("up-operator", { podSecurity: "restricted" });
    modelsNs = await createNamespace("up-models", { podSecurity: "restricted" });
    storedNs = await createNamespace("up-stored");
    imageA = recipeFor("mlmodel").ref;
    imageB = await operatorImageBuild("b", scratch);
    assert.notEqual(imageB.ref, imageA);
    const imported = await loadImage(cluster.dir, imageB.archive);
    assert.ok(imported.includes(imageB.ref), `imported ${imported.join(", ")}`);
    chartB = nextChartVersion({
      version: "0.1.1",
      appVersion: imageB.ref.split(":").at(-1)!,
      field: newField,
    });

    files = await startModelFileServer({ host: cluster.nodeIp });
    const trained = await trainSampleModel(kubeConfig(), { namespace: modelsNs.name });
    sample = { ...trained, uri: files.add("iris.tgz", trained.archive) };

    const installed = helm([
      "install",
      release,
      chartDir,
      "--kubeconfig",
      cluster.kubeconfig,
      "-n",
      operatorNs.name,
      ...releaseValues(imageA, [modelsNs.name]),
      "--wait",
      "--timeout",
      "10m",
    ]);
    assert.equal(installed.status, 0, installed.stderr);
    await applyBuiltinRuntimes(admin);
    await readyManagers(admin, operatorNs.name, 2);

    await applyFilesCa(admin, modelsNs.name, files.ca);
    const model = sklearnModel("iris", sample);
    await admin.apply(
      mlModelKind,
      { ...model, metadata: { ...model.metadata, namespace: modelsNs.name } },
      { fieldManager: "e2e", force: true },
    );
    const ready = await waitForPhase(admin, modelsNs.name, "iris", "Ready", undefined, 600_000);
    const config = new KubeConfig();
    config.loadFromFile(cluster.kubeconfig);
    endpoint = await serviceEndpoint(config.makeApiClient(CoreV1Api), ready.status!.url!);
    assert.deepEqual((await firstAnswer(endpoint, sample)).data, sample.predictions);
    traffic = new Traffic({
      send: () => inferV2(endpoint, "iris", sample.inputs),
      judge: versionClassifier({ iris: sample.predictions }),
      ratePerSecond,
      maxRequests: ratePerSecond * (maxDurationMs / 1000),
      maxDurationMs,
    }).start();
    burners = burnersForTraffic("upgrade.test.ts", maxDurationMs);
    await moreAnswers(traffic, ratePerSecond * 2, "the model serving before any upgrade");
  }, liveTrafficHook);

  after(async () => {
    try {
      await burners?.stop();
      if (traffic) {
        const report = await traffic.stop();
        console.log(
          `# traffic over the whole file: sent ${report.sent}, served ${report.served}, failed ${report.failed}, dropped ${report.dropped}, p50 ${report.latencyMs.p50} ms, p99 ${report.latencyMs.p99} ms`,
        );
      }
      for (const line of figures) console.log(`# ${line}`);
      if (operatorNs) helm(["uninstall", release, "--kubeconfig", cluster.kubeconfig, "-n", operatorNs.name]);
      await files?.stop();
      await modelsNs?.delete();
      await storedNs?.delete();
      await operatorNs?.delete();
    } finally {
      await releaseNode?.();
      await stopOwnRealNodes(clusterDir);
    }
  });

  /** What an upgrade must leave as it was: the model's pods and the template they run. */
  async function workload() {
    const pods = (await podsOf(admin, modelsNs.name, "iris")) as unknown as V1Pod[];
    const deployments = (
      await admin.list(builtinKinds.Deployment, {
        namespace: modelsNs.name,
        labelSelector: "serving.mlmodel.dev/model=iris",
      })
    ).items;
    return {
      pods: pods
        .map((p) => ({
          name: p.metadata?.name,
          uid: p.metadata?.uid,
          templateHash: p.metadata?.labels?.["pod-template-hash"],
          restarts: (p.status?.containerStatuses ?? []).map((c) => c.restartCount),
        }))
        .sort((a, b) => (a.name! < b.name! ? -1 : 1)),
      deployments: deployments.map((d) => ({
        name: d.metadata.name,
        uid: d.metadata.uid,
        generation: d.metadata.generation,
        revision: d.metadata.annotations?.["deployment.kubernetes.io/revision"],
      })),
    };
  }

  /** Every operator pod's mlmodel_operator_build_info line, read from the pod itself. */
  async function buildInfo(pods: V1Pod[]): Promise<string[]> {
    const lines: string[] = [];
    for (const pod of pods) {
      const text = await waitFor(`${pod.metadata?.name}'s /metrics`, async () => {
        const r = await fetch(`http://${pod.status?.podIP}:8080/metrics`, {
          signal: AbortSignal.timeout(5000),
        }).catch(() => undefined);
        return r?.ok ? r.text() : undefined;
      });
      lines.push(...text.split("\n").filter((l) => l.startsWith(`${buildInfoMetric}{`)));
    }
    return lines;
  }

  /** `kubectl apply --server-side --validate=strict` of an MLModel in the unwatched namespace. */
  async function applyStrict(
    name: string,
    spec: Record<string, unknown> = {},
    labels: Record<string, string> = {},
  ) {
    const model = sklearnModel(name, sample);
    const obj = {
      ...model,
      metadata: { name, namespace: storedNs.name, labels },
      spec: { ...model.spec, ...spec },
    };
    const file = join(scratch, `${name}.yaml`);
    writeFileSync(file, stringify(obj));
    return kubectlAsync(cluster.kubeconfig, [
      "apply",
      "--server-side",
      "--field-manager=e2e",
      "--validate=strict",
      "-f",
      file,
    ]);
  }

  /** The release's revisions: number, chart, status, description. */
  const releaseHistory = async () => {
    const history = await helmAsync(["history", release, ...releaseArgs(), "-o", "json"]);
    assert.equal(history.status, 0, history.stderr);
    const revisions = JSON.parse(history.stdout) as {
      revision: number;
      status: string;
      chart: string;
      description: string;
    }[];
    return revisions.map((r) => [r.revision, r.chart, r.status, r.description]);
  };

  const servedSchema = async () => {
    const crd = await admin.get<KubeObject & { spec: { versions: { schema: unknown }[] } }>(
      builtinKinds.CustomResourceDefinition,
      { name: "mlmodels.serving.mlmodel.dev" },
    );
    // biome-ignore lint/suspicious/noExplicitAny: a CRD's schema, read as JSON.
    return crd!.spec.versions.map((v: any) =>
      Object.keys(v.schema.openAPIV3Schema.properties.spec.properties),
    );
  };

  /**
   * `helm <change> --wait` (an upgrade or a rollback) that leaves the release running `image`,
   * judged: no failed request, the model untouched, one leader of `image`.
   */
  async function changeUnderTraffic(what: string, change: string[], image: string) {
    const before = await workload();
    assert.ok(before.pods.length >= 1, "the model has serving pods");
    const model = (await admin.get<MLModel>(mlModelKind, { namespace: modelsNs.name, name: "iris" }))!;
    traffic.mark(`${what} started`);
    const startedAt = Date.now();
    const helmRun = await helmAsync([...change, "--wait", "--timeout", "10m"]);
    assert.equal(helmRun.status, 0, `helm ${change[0]} to ${image}: ${helmRun.stderr}`);
    const changedIn = Date.now() - startedAt;
    const pods = await readyManagers(
      admin,
      operatorNs.name,
      2,
      (p) => p.spec?.containers[0]?.image === image,
    );
    const lease = await readLease(admin, operatorNs.name);
    const leader = podOfIdentity(lease.spec.holderIdentity);
    const leadingIn = Date.now() - startedAt;
    assert.ok(
      pods.some((p) => p.metadata?.name === leader),
      `the Lease is held by a pod of ${image} (${leader})`,
    );
    // Traffic well after the new leader took over: it has had time to reconcile the model.
    await moreAnswers(traffic, ratePerSecond * 10, `the model serving after ${what}`);
    traffic.mark(`${what} served`);
    const report = traffic.report(`${what} started`, `${what} served`);
    assertNoFailures(report, what);
    // The traffic really ran at its rate all along: no tick dropped since the start, and no gap
    // between two requests sent in the window longer than a few dozen intervals.
    assert.equal(traffic.report().dropped, 0, "ticks dropped since the traffic started");
    const sends = traffic.samples
      .map((s) => s.at)
      .filter((t) => t >= traffic.markAt(`${what} started`) && t < traffic.markAt(`${what} served`))
      .sort((a, b) => a - b);
    const widestGap = Math.max(...sends.slice(1).map((t, i) => t - sends[i]!));
    const interval = 1000 / ratePerSecond;
    assert.ok(widestGap / interval <= 50, `${widestGap.toFixed(0)} ms without a request sent`);
    assert.deepEqual(await workload(), before, `${what} restarted or rolled the model's pods`);
    const now = (await admin.get<MLModel>(mlModelKind, { namespace: modelsNs.name, name: "iris" }))!;
    assert.equal(now.metadata.generation, model.metadata.generation);
    assert.equal(now.status?.phase, "Ready");
    assert.equal(now.status?.revision?.current, model.status?.revision?.current, "the same revision serves");
    const log = localCluster()?.auditLog;
    assert.ok(log, "the real-node cluster's audit log");
    const writes = auditEvents(log).filter(
      (e) =>
        e.user.username === user() &&
        at(e) >= startedAt &&
        e.objectRef?.namespace === modelsNs.name &&
        succeeded(e),
    );
    // A write to the Deployment is what could roll the pods: the new leader finds nothing to change.
    assert.deepEqual(
      writes
        .filter((e) => e.objectRef?.resource === "deployments")
        .map((e) => `${e.verb} ${e.objectRef?.resource}/${e.objectRef?.name}`),
      [],
      `the operator's writes to the model's Deployments during ${what}`,
    );
    const byResource = Object.entries(
      writes.reduce<Record<string, number>>((n, e) => {
        const key = `${e.verb} ${e.objectRef?.resource}${e.objectRef?.subresource ? `/${e.objectRef.subresource}` : ""}`;
        n[key] = (n[key] ?? 0) + 1;
        return n;
      }, {}),
    );
    figures.push(
      `${what}: helm ${change[0]} --wait took ${(changedIn / 1000).toFixed(1)} s, both pods of the new version Ready and one leading after ${(leadingIn / 1000).toFixed(1)} s; requests sent ${report.sent}, served ${report.served}, failed ${report.failed}, dropped ${report.dropped}, p50 ${report.latencyMs.p50} ms, p99 ${report.latencyMs.p99} ms, max ${report.latencyMs.max} ms, widest gap between sends ${widestGap.toFixed(0)} ms; model pods ${before.pods.length} kept (restarts ${before.pods.flatMap((p) => p.restarts).join(",")}); leader ${leader}; operator writes in the models namespace: ${JSON.stringify(byResource)}`,
    );
    console.log(`# ${figures.at(-1)}`);
    return pods;
  }

  it("A: the new field does not exist yet (a strict apply that sets it is refused); an object written under A is stored", async () => {
    const refused = await applyStrict("written-by-b-too-early", { [newField]: "too early" });
    assert.notEqual(refused.status, 0, "a strict apply of an unknown field fails under A");
    assert.match(refused.stderr, new RegExp(newField), refused.stderr);
    const stored = await applyStrict("written-by-a");
    assert.equal(stored.status, 0, stored.stderr);
    assert.ok((await servedSchema()).every((fields) => !fields.includes(newField)));
    const pods = await readyManagers(admin, operatorNs.name, 2);
    assert.deepEqual(await buildInfo(pods), [
      `${buildInfoMetric}{build=""} 1`,
      `${buildInfoMetric}{build=""} 1`,
    ]);
  });

  it("A -> B: zero failed requests, the model's pods untouched, B's build reported by both pods, B's CRD served, A's object still valid", async () => {
    // The release's first upgrade adopts the CRDs helm install created from crds/.
    const pods = await changeUnderTraffic(
      "A -> B",
      upgradeTo(chartB, imageB.ref, ["--take-ownership"]),
      imageB.ref,
    );
    assert.deepEqual(await buildInfo(pods), [
      `${buildInfoMetric}{build="b"} 1`,
      `${buildInfoMetric}{build="b"} 1`,
    ]);
    assert.ok(
      (await servedSchema()).every((fields) => fields.includes(newField)),
      "B's field in the served CRD",
    );
    // Strict applies need the API server's new validation, which follows the CRD within moments.
    const written = await waitFor("a strict apply of B's field to be accepted", async () => {
      const r = await applyStrict("written-by-b", { [newField]: "written under B" });
      return r.status === 0 ? r : undefined;
    });
    assert.equal(written.status, 0);
    const stored = await admin.get<MLModel>(mlModelKind, { namespace: storedNs.name, name: "written-by-b" });
    assert.equal((stored!.spec as unknown as Record<string, unknown>)[newField], "written under B");
    const again = await applyStrict("written-by-a", {}, { "checked-under": "b" });
    assert.equal(again.status, 0, `the object A wrote, updated under B: ${again.stderr}`);
  });

  it("B -> A by helm rollback: zero failed requests, the model's pods untouched, B's build gone, the CRDs kept as B left them, B's object still valid under A", async () => {
    const pods = await changeUnderTraffic("B -> A (rollback)", rollback(), imageA);
    assert.deepEqual(await buildInfo(pods), [
      `${buildInfoMetric}{build=""} 1`,
      `${buildInfoMetric}{build=""} 1`,
    ]);
    assert.deepEqual(await releaseHistory(), [
      [1, "mlmodel-operator-0.1.0", "superseded", "Install complete"],
      [2, "mlmodel-operator-0.1.1", "superseded", "Upgrade complete"],
      [3, "mlmodel-operator-0.1.0", "deployed", "Rollback to 1"],
    ]);
    // The install's manifest has no CRDs: Helm would delete them, but they are marked keep.
    assert.ok(
      (await servedSchema()).every((fields) => fields.includes(newField)),
      "B's CRD is still served after the rollback",
    );
    const kept = await admin.get<MLModel>(mlModelKind, { namespace: storedNs.name, name: "written-by-b" });
    assert.equal((kept!.spec as unknown as Record<string, unknown>)[newField], "written under B");
    const again = await applyStrict(
      "written-by-b",
      { [newField]: "written under B" },
      { "checked-under": "a" },
    );
    assert.equal(again.status, 0, `the object B wrote, updated under A: ${again.stderr}`);
    const old = await applyStrict("written-by-a", {}, { "checked-under": "a" });
    assert.equal(old.status, 0, `the object A wrote, updated under A: ${old.stderr}`);
    // The kept CRDs still name the release: a later upgrade adopts them without --take-ownership.
    const next = await helmAsync([...upgradeTo(chartB, imageB.ref), "--dry-run=server"]);
    assert.equal(next.status, 0, `an upgrade after the rollback, without --take-ownership: ${next.stderr}`);
  });

  it("A's schema again: helm upgrade to A's chart, same values, applies A's CRDs and takes them back into the release; no pod rolls; what B wrote is still valid", async () => {
    const managers = async () => (await livePods(admin, operatorNs.name)).map((p) => p.metadata?.uid).sort();
    const managersBefore = await managers();
    const modelBefore = await workload();
    // The revision before it (the rollback's) holds no CRDs: the upgrade adopts them (they kept
    // the release's labels) and patches them to A's files.
    const toA = await helmAsync([...upgradeTo(chartDir, imageA), "--wait", "--timeout", "10m"]);
    assert.equal(toA.status, 0, toA.stderr);
    assert.deepEqual(await managers(), managersBefore, "the same values: the operator's pods did not roll");
    assert.deepEqual(await workload(), modelBefore, "nor did the model's");
    assert.deepEqual((await releaseHistory()).at(-1), [
      4,
      "mlmodel-operator-0.1.0",
      "deployed",
      "Upgrade complete",
    ]);
    assert.ok(
      (await servedSchema()).every((fields) => !fields.includes(newField)),
      "A's CRD is served again",
    );
    const crd = await admin.get<KubeObject>(builtinKinds.CustomResourceDefinition, {
      name: "mlmodels.serving.mlmodel.dev",
    });
    assert.equal(crd?.metadata.annotations?.["helm.sh/resource-policy"], "keep");
    // What B wrote is read under A's schema: the unknown field is pruned, the object stays valid.
    const read = await waitFor("B's field pruned from what B wrote", async () => {
      const m = await admin.get<MLModel>(mlModelKind, { namespace: storedNs.name, name: "written-by-b" });
      return m && !(newField in (m.spec as object)) ? m : undefined;
    });
    assert.equal(read.spec.model.uri, sample.uri);
    const again = await applyStrict("written-by-b", {}, { "checked-under": "a-schema" });
    assert.equal(again.status, 0, `the object B wrote, updated under A's schema: ${again.stderr}`);
    // The release's revision holds the CRDs again: the next upgrade patches them as its own.
    const next = await helmAsync([...upgradeTo(chartB, imageB.ref), "--dry-run=server"]);
    assert.equal(next.status, 0, `an upgrade after it, without --take-ownership: ${next.stderr}`);
  });
});
