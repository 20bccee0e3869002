// test-needs: real-node, images
/**
 * Canaries under live traffic on real pods (issue 17's proof with real traffic). The sample
 * scikit-learn model, v1 and v2 trained to answer the same rows differently, served by MLServer
 * on the real node with 4 replicas and `rollout.canary`; requests keep coming (30 a second, each
 * on a connection of its own through the model's Service ClusterIP, so kube-proxy picks a ready
 * pod anew for each) and every answer says which version gave it.
 *
 * 1. A canary of v2 at 25 %: Replicas mode carves round(4 x 25 / 100) = 1 replica out of the
 *    4 (3 + 1, exactly 25 %). Over 1,500 requests with that split in place the share of v2's
 *    answers lies within the binomial 99.9 % bound of the split the status reports. Then
 *    `mlmodel rollback` aborts it: once v2's pod is gone every answer is v1's.
 * 2. A canary of v2 at 40 %: round(4 x 40 / 100) = 2 replicas, 2 + 2, which serves 50 % (the
 *    status says the split is coarse). The share is checked against the 50 % the operator set,
 *    not the 40 % asked (the bound at n = 1,500 tells them apart). Then `mlmodel promote`:
 *    once v1's pods are gone every answer is v2's.
 * 3. A canary of a v3 MLServer cannot load (a real CrashLoopBackOff): never ready, so it never
 *    takes a replica from the stable nor a request; the operator aborts it on its own and records
 *    it like an automatic rollback. Every answer is v2's.
 *
 * Zero requests fail through each start, the steady split, each abort and the promotion. Counts
 * and ratios only: nothing here asserts how long anything took.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import type { SampleModel } from "../../../src/images/sample-model.ts";
import type { Traffic } from "../../harness/traffic.ts";
import { getModel } from "../operator/helpers.ts";
import { type CanaryUnderTraffic, canaryTraffic, figures, startCanaryTraffic } from "./canary-live.ts";
import {
  applyCaSecret,
  applyModel,
  publishSample,
  type RealNodeBed,
  realNodeBed,
  removeRealNodeBed,
  sklearnModel,
} from "./fixture.ts";
import {
  assertNoFailures,
  burnersForTraffic,
  holdNodeForTraffic,
  kubeProxyPausesForTraffic,
  liveTrafficHook,
  liveTrafficSuiteTimeoutMs,
} from "./live-traffic.ts";

const { name, replicas } = canaryTraffic;

describe("canaries under live traffic on a real node", { timeout: liveTrafficSuiteTimeoutMs }, () => {
  let bed: RealNodeBed;
  let v1: SampleModel & { uri: string };
  let v2: SampleModel & { uri: string };
  let v3: SampleModel & { uri: string };
  let releaseNode: (() => Promise<void>) | undefined;
  let traffic: Traffic<unknown>;
  let live: CanaryUnderTraffic;
  let burners: ReturnType<typeof burnersForTraffic>;
  let kubeProxyPauses: Awaited<ReturnType<typeof kubeProxyPausesForTraffic>>;

  const spec = (model: SampleModel & { uri: string }, trafficPercent: number): MLModel =>
    sklearnModel(name, model, { replicas, rollout: { canary: { trafficPercent } } } as Partial<MLModelSpec>);

  before(async () => {
    bed = await realNodeBed("rn-canary");
    releaseNode = await holdNodeForTraffic(bed.cluster, "canary-traffic.test.ts");
    [v1, v2, v3] = await Promise.all([
      publishSample(bed, "iris-v1.tgz", { version: 1 }),
      publishSample(bed, "iris-v2.tgz", { version: 2 }),
      publishSample(bed, "iris-v3.tgz", { version: 3, broken: true }),
    ]);
    await applyCaSecret(bed);
    await applyModel(bed, spec(v1, 25));
    let ready: MLModel;
    ({ ready, traffic, live } = await startCanaryTraffic(bed, v1, v2));
    burners = burnersForTraffic("canary-traffic.test.ts", canaryTraffic.maxDurationMs);
    kubeProxyPauses = await kubeProxyPausesForTraffic(
      bed.cluster,
      "canary-traffic.test.ts",
      canaryTraffic.maxDurationMs,
    );
    assert.equal(ready.status?.canary, undefined, "a model's first revision rolls out directly");
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

  it("a canary at 25 % (1 of 4 replicas) gets its binomial share, and mlmodel rollback aborts it: zero failed requests, then only v1", async () => {
    traffic.mark("canary 1");
    await applyModel(bed, spec(v2, 25));
    const paused = await live.measureSplit("25 %", 3, 1);
    const c = paused.status!.canary!;
    assert.deepEqual(
      [c.trafficPercent, c.effectivePercent, c.exact, c.mode],
      [25, 25, true, "Replicas"],
      "round(4 x 25 / 100) = 1 of 4 replicas: exactly 25 %",
    );
    const X = c.revision!;

    const out = await live.mlmodel(["rollback", name]);
    assert.match(out, /the running canary is aborted/);
    const aborted = await live.canaryEnded("Aborted", c.stableRevision!, "v1");
    assert.deepEqual([aborted.status?.canary?.reason, aborted.status?.canary?.revision], ["RolledBack", X]);
    await live.onlyAnswers("abort", "v1", X);
    traffic.mark("canary 1 end");
    const report = traffic.report("canary 1", "canary 1 end");
    assertNoFailures(report, "canary start, 25 % split, abort");
    console.log(`# canary 1 (25 %, abort): ${figures(report)}`);
  });

  it("a canary at 40 % serves 50 % (2 of 4 replicas, said in status) and mlmodel promote moves every answer to v2: zero failed requests", async () => {
    traffic.mark("canary 2");
    await applyModel(bed, spec(v2, 40));
    const paused = await live.measureSplit("40 % asked", 2, 2);
    const c = paused.status!.canary!;
    assert.deepEqual(
      [c.trafficPercent, c.effectivePercent, c.exact, c.mode],
      [40, 50, false, "Replicas"],
      "round(4 x 40 / 100) = 2 of 4 replicas: 50 %, not 40 %",
    );
    assert.match(c.message ?? "", /cannot carry 40%: 2 of 4 replicas gives 50%/);
    const X = c.revision!;
    const S = c.stableRevision!;

    const out = await live.mlmodel(["promote", name]);
    assert.match(out, /promoting the canary of revision/);
    const promoted = await live.canaryEnded("Promoted", X, "v2");
    assert.deepEqual(
      [promoted.status?.revision?.lastReady, promoted.status?.canary?.reason],
      [X, "PromotedByUser"],
    );
    await live.onlyAnswers("promote", "v2", S);
    const pods = await live.servingPods();
    assert.deepEqual(
      pods.map((p) => [p.revision, p.canary, p.ready]),
      Array.from({ length: replicas }, () => [X, false, true]),
      "the stable Deployment serves v2 on every replica; the canary Deployment's pods are gone",
    );
    traffic.mark("canary 2 end");
    const report = traffic.report("canary 2", "canary 2 end");
    assertNoFailures(report, "canary start, 50 % split, promotion");
    console.log(`# canary 2 (40 % -> 50 %, promote): ${figures(report)}`);
  });

  it("a canary that crash-loops for real is aborted on its own: v2 answers every request, none fails", async () => {
    const stable = (await getModel(bed.admin, bed.ns.name, name))!.status!.revision!.lastReady!;
    const stablePods = (await live.servingPods()).map((p) => p.name);
    traffic.mark("canary 3");
    await applyModel(bed, spec(v3, 25));
    // The last canary was Promoted: Aborted can only be this one's end.
    const aborted = await live.canaryEnded("Aborted", stable, "v2");
    const X = aborted.status!.canary!.revision!;
    assert.equal(aborted.status?.canary?.reason, "CrashLoopBackOff", JSON.stringify(aborted.status?.canary));
    assert.deepEqual(
      [aborted.status?.revision?.failed?.revision, aborted.status?.revision?.failed?.reason],
      [X, "CrashLoopBackOff"],
      "recorded like an automatic rollback",
    );
    assert.equal(aborted.spec.model.uri, v3.uri, "the spec is left as written");
    await live.onlyAnswers("crash-loop abort", "v2", X);
    assert.deepEqual(
      (await live.servingPods()).map((p) => p.name),
      stablePods,
      "the same stable pods throughout: a canary that is never ready takes no replica from the stable",
    );
    traffic.mark("canary 3 end");
    const report = traffic.report("canary 3", "canary 3 end");
    assertNoFailures(report, "a crash-looping canary and its abort");
    assert.deepEqual(Object.keys(report.byLabel), ["v2"], "the canary never served: it was never ready");
    console.log(`# canary 3 (crash loop, aborted on its own): ${figures(report)}`);
  });

  it("no request failed over the whole run", async () => {
    const report = await traffic.stop();
    assertNoFailures(report, "the whole run");
    console.log(`# whole run: ${figures(report)}`);
  });
});
