// test-needs: real-node, images
/**
 * A model update under live inference traffic, on real pods: v1 -> v2 while requests keep coming
 * (25 a second, each on a connection of its own through the Service's ClusterIP), with zero
 * failed requests and answers that switch from v1's predictions to v2's; then a broken v3 (a
 * model MLServer cannot load: a real ModelLoadFailed) that the operator rolls back to v2 on its
 * own, again with zero failed requests; `mlmodel history` lists the three revisions.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { inferV2, type SampleModel, type ServiceEndpoint } from "../../../src/images/sample-model.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { waitFor } from "../../harness/cluster.ts";
import { labelRuns, Traffic, versionClassifier } from "../../harness/traffic.ts";
import { getModel, podsOf, repoRoot, waitForPhase } from "../operator/helpers.ts";
import {
  applyCaSecret,
  applyModel,
  endpointOf,
  firstAnswer,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  removeRealNodeBed,
  sklearnModel,
  waitForModel,
} from "./fixture.ts";
import {
  assertNoFailures,
  burnersForTraffic,
  holdNodeForTraffic,
  kubeProxyPausesForTraffic,
  liveTrafficHook,
  liveTrafficSuiteTimeoutMs,
  moreAnswers,
} from "./live-traffic.ts";

const ratePerSecond = 25;
// Bounds: the whole test sends at most this many requests, for at most this long.
const maxDurationMs = 15 * 60_000;
const maxRequests = ratePerSecond * (maxDurationMs / 1000);

describe("a model update under live traffic on a real node", { timeout: liveTrafficSuiteTimeoutMs }, () => {
  let bed: RealNodeBed;
  let v1: SampleModel & { uri: string };
  let v2: SampleModel & { uri: string };
  let v3: SampleModel & { uri: string };
  let endpoint: ServiceEndpoint;
  let releaseNode: (() => Promise<void>) | undefined;
  let traffic: Traffic<Awaited<ReturnType<typeof inferV2>>>;
  let burners: ReturnType<typeof burnersForTraffic>;
  let kubeProxyPauses: Awaited<ReturnType<typeof kubeProxyPausesForTraffic>>;

  const servingRevisions = async () =>
    new Set(
      (await podsOf(bed.admin, bed.ns.name, "iris")).map(
        (p) => p.metadata.labels?.["serving.mlmodel.dev/revision"],
      ),
    );

  before(async () => {
    bed = await realNodeBed("rn-rollout");
    releaseNode = await holdNodeForTraffic(bed.cluster, "rollout.test.ts");
    [v1, v2, v3] = await Promise.all([
      publishSample(bed, "iris-v1.tgz", { version: 1 }),
      publishSample(bed, "iris-v2.tgz", { version: 2 }),
      publishSample(bed, "iris-v3.tgz", { version: 3, broken: true }),
    ]);
    await applyCaSecret(bed);
    await applyModel(bed, sklearnModel("iris", v1));
    const ready = await waitForPhase(bed.admin, bed.ns.name, "iris", "Ready", undefined, 600_000);
    endpoint = await endpointOf(bed, ready);
    assert.deepEqual((await firstAnswer(endpoint, v1)).data, v1.predictions);
    traffic = new Traffic({
      send: () => inferV2(endpoint, "iris", v1.inputs),
      judge: versionClassifier({ v1: v1.predictions, v2: v2.predictions }),
      ratePerSecond,
      maxRequests,
      maxDurationMs,
    }).start();
    burners = burnersForTraffic("rollout.test.ts", maxDurationMs);
    kubeProxyPauses = await kubeProxyPausesForTraffic(bed.cluster, "rollout.test.ts", maxDurationMs);
    await moreAnswers(traffic, ratePerSecond * 2, "v1 serving");
  }, liveTrafficHook);
  after(async () => {
    try {
      await burners?.stop();
      await kubeProxyPauses?.stop();
      await traffic?.stop();
      await removeRealNodeBed(bed);
    } finally {
      await releaseNode?.();
    }
  });

  it("v1 -> v2: zero failed requests, and the answers switch from v1's predictions to v2's", async () => {
    const before = (await getModel(bed.admin, bed.ns.name, "iris"))!;
    traffic.mark("v2 applied");
    await applyModel(bed, sklearnModel("iris", v2));
    const rolled = await waitForModel(bed, "iris", "v2 Ready and the only revision serving", async (m) => {
      const revisions = await servingRevisions();
      const s = m.status;
      return (
        s?.phase === "Ready" &&
        s.observedGeneration === m.metadata.generation &&
        s.revision?.currentNumber === 2 &&
        revisions.size === 1 &&
        revisions.has(s.revision.current)
      );
    });
    assert.notEqual(rolled.status?.revision?.current, before.status?.revision?.current);
    // The rollout's length, old pods' drain included (a figure for the log, not a limit).
    console.log(
      `# v1 -> v2: v2 alone after ${((traffic.now() - traffic.markAt("v2 applied")) / 1000).toFixed(1)} s`,
    );
    // The old pod answers while it drains, for as long as the node's rules still send it new
    // connections (longer when kube-proxy lags): wait until it is gone altogether, then let v2
    // answer for a while before judging.
    const oldRevision = before.status!.revision!.current;
    await waitFor("v1's pods to be gone, drained ones included", async () => {
      const pods = await bed.admin.list<KubeObject>(builtinKinds.Pod, {
        namespace: bed.ns.name,
        labelSelector: `serving.mlmodel.dev/model=iris,serving.mlmodel.dev/revision=${oldRevision}`,
      });
      return pods.items.length === 0;
    });
    traffic.mark("v1 gone");
    await moreAnswers(traffic, ratePerSecond * 4, "v2 serving");
    traffic.mark("v2 served");
    const report = traffic.report("v2 applied", "v2 served");
    assertNoFailures(report, "during v1 -> v2");
    const runs = labelRuns(report.labels);
    assert.equal(runs[0], "v1", `the first answers after the update came from v1: ${runs.join(" ")}`);
    assert.equal(runs.at(-1), "v2", `the last answers came from v2: ${runs.join(" ")}`);
    // Once no v1 pod exists, nothing but v2 can answer.
    const tail = traffic.report("v1 gone", "v2 served").labels;
    assert.deepEqual(
      [...new Set(tail)],
      ["v2"],
      `the ${tail.length} answers after v1's pods were gone: ${labelRuns(tail).join(" ")}`,
    );
    console.log(`# v1 -> v2: ${JSON.stringify({ ...report, labels: runs })}`);
  });

  it("a broken v3 crash-loops for real and is rolled back to v2 on its own, with zero failed requests", async () => {
    const v2Revision = (await getModel(bed.admin, bed.ns.name, "iris"))!.status!.revision!.current;
    traffic.mark("v3 applied");
    await applyModel(bed, sklearnModel("iris", v3));
    const rolledBack = await waitForModel(bed, "iris", "v3 rolled back", (m) => {
      const c = m.status?.conditions?.find((x) => x.type === "RolledBack");
      return c?.status === "True" && m.status?.phase === "Ready";
    });
    const s = rolledBack.status!;
    assert.equal(s.revision?.current, v2Revision, "v2 serves again");
    assert.equal(s.revision?.failed?.reason, "ModelLoadFailed", JSON.stringify(s.revision?.failed));
    assert.equal(s.revision?.failed?.number, 3);
    await waitFor("only v2's pods to be left", async () => {
      const revisions = await servingRevisions();
      return revisions.size === 1 && revisions.has(v2Revision);
    });
    await moreAnswers(traffic, ratePerSecond * 4, "v2 serving after the rollback");
    traffic.mark("rolled back");
    const report = traffic.report("v3 applied", "rolled back");
    assertNoFailures(report, "during v3's crash loop and its rollback");
    assert.deepEqual(Object.keys(report.byLabel), ["v2"], "only v2 answered: v3 never served");
    console.log(`# v3 -> rollback: ${JSON.stringify({ ...report, labels: labelRuns(report.labels) })}`);
  });

  it("mlmodel history lists the three revisions", async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [join(repoRoot, "src", "cli", "main.ts"), "history", "iris", "-n", bed.ns.name, "-o", "json"],
      { env: { ...process.env, KUBECONFIG: bed.cluster.kubeconfig } },
    );
    const history = JSON.parse(stdout) as { number: number; modelURI?: string; marks: string[] }[];
    assert.deepEqual(
      history.map((h) => h.number),
      [3, 2, 1],
      stdout,
    );
    assert.deepEqual(history.find((h) => h.number === 2)?.marks, ["serving"], stdout);
    for (const [number, model] of [
      [1, v1],
      [2, v2],
      [3, v3],
    ] as const)
      assert.equal(history.find((h) => h.number === number)?.modelURI, model.uri, stdout);
  });
});
