/**
 * The memos of the reconcile (src/operator/memo.ts, plan.ts `planned`, the desired children of
 * desired.ts, drift.ts withAppliedHash): the same inputs give the very same objects, and a
 * changed input never gets a stale answer, whatever object identity the input comes in.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment } from "@kubernetes/client-node";
import { clusterServingRuntimeKind, mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import {
  desiredDeployment,
  desiredDownloadJob,
  desiredService,
  desiredStorage,
} from "../../../src/operator/desired.ts";
import { withAppliedHash } from "../../../src/operator/drift.ts";
import { frozenHash, keptInput, memoOnFrozen, sameData } from "../../../src/operator/memo.ts";
import { shortHash } from "../../../src/operator/names.ts";
import { planModel, planned, plannedModels } from "../../../src/operator/plan.ts";
import { deepFreeze } from "../../../src/runtime/index.ts";
import { model, owner, tf, tfServing } from "./fixtures.ts";
import { mlModel, World } from "./reconcile-harness.ts";

const config = { downloaderImage: "example.com/mlmodel:1" };
const spec = (version: string): MLModelSpec => ({
  model: { uri: "s3://models/resnet", format: "tensorflow", version },
});
/** A model as a new watch event brings it: a new object every time. */
const fresh = (s: MLModelSpec, uid = "uid-memo"): MLModel => {
  const m = model(structuredClone(s));
  m.metadata.uid = uid;
  return deepFreeze(m) as MLModel;
};

describe("sameData", () => {
  it("compares plain data whatever its key order; anything else equals only itself", () => {
    assert.ok(sameData({ a: 1, b: [1, { c: "x" }] }, { b: [1, { c: "x" }], a: 1 }));
    assert.ok(sameData(null, null));
    assert.ok(!sameData({ a: 1 }, { a: 1, b: 2 }));
    assert.ok(!sameData({ a: 1, b: undefined }, { a: 1, c: undefined }), "a key absent is not a key set");
    assert.ok(!sameData([1, 2], [2, 1]));
    assert.ok(!sameData([1], { 0: 1 }));
    assert.ok(!sameData("1", 1));
    assert.ok(!sameData(new Date(0), new Date(0)), "a Date is not plain data: different unless the same");
    const d = new Date(0);
    assert.ok(sameData({ d }, { d }));
  });

  it("keptInput keeps a frozen value, and a frozen copy of any other", () => {
    const frozen = deepFreeze({ a: { b: 1 } });
    assert.equal(keptInput(frozen), frozen);
    const open = { a: { b: 1 } };
    const kept = keptInput(open);
    open.a.b = 2;
    assert.deepEqual(kept, { a: { b: 1 } });
    assert.ok(Object.isFrozen(kept.a));
  });

  it("memoOnFrozen answers from its memo for a frozen key only", () => {
    let calls = 0;
    const size = memoOnFrozen((o: { n: number[] }) => {
      calls++;
      return o.n.length;
    });
    const frozen = deepFreeze({ n: [1, 2] });
    assert.equal(size(frozen), 2);
    assert.equal(size(frozen), 2);
    assert.equal(calls, 1);
    const open = { n: [1] };
    assert.equal(size(open), 1);
    open.n.push(2);
    assert.equal(size(open), 2, "an object that may change is worked out again");
    assert.equal(frozenHash(frozen), shortHash(frozen));
  });
});

describe("planned: planModel remembered", () => {
  it("gives the same plan for the same inputs in new objects, equal to planModel's", () => {
    const first = planned(fresh(spec("1")), tf);
    const again = planned(fresh(spec("1")), { ...tf, spec: structuredClone(tf.spec) });
    assert.equal(again, first, "equal inputs, new objects: the plan kept");
    assert.deepEqual(first, planModel(fresh(spec("1")), tf));
  });

  it("plans again for any changed input: spec, runtime, recorded source, name, namespace, uid", () => {
    const base = fresh(spec("1"));
    const plan = planned(base, tf);
    const changed: [string, () => unknown][] = [
      ["spec (same generation)", () => planned(fresh(spec("2")), tf)],
      ["a spec field added", () => planned(fresh({ ...spec("1"), replicas: 2 }), tf)],
      ["runtime ref", () => planned(base, { ...tf, ref: "ServingRuntime/tensorflow-serving" })],
      [
        "runtime spec",
        () => planned(base, { ...tf, spec: { ...tf.spec, image: "registry.local/tf:other" } }),
      ],
      ["recorded source", () => planned(base, tf, { content: "abc", uriSecret: "resnet-uri-1" })],
      ["name", () => planned(deepFreeze({ ...base, metadata: { ...base.metadata, name: "other" } }), tf)],
      [
        "namespace",
        () => planned(deepFreeze({ ...base, metadata: { ...base.metadata, namespace: "other" } }), tf),
      ],
      ["uid", () => planned(fresh(spec("1"), "uid-other"), tf)],
    ];
    for (const [what, plan2] of changed) {
      const other = plan2() as typeof plan;
      assert.notEqual(other, plan, what);
      // The uid is no part of a plan: another model's plan is only another object.
      if (what !== "uid") assert.notDeepEqual(other, plan, what);
    }
    // Seven other plans of this uid since: the first was let go (plansPerModel), and made again.
    assert.deepEqual(planned(fresh(spec("1")), tf), plan);
    const recorded = planned(base, tf, { content: "abc", uriSecret: "resnet-uri-1" });
    assert.equal(recorded.source.type === "download" && recorded.source.content, "abc");
  });

  it("is not fooled by a caller changing its spec object after planning", () => {
    const open: MLModel = {
      ...model(spec("1")),
      metadata: { ...model(spec("1")).metadata, uid: "uid-open" },
    };
    const plan = planned(open, tf);
    open.spec.model.version = "2";
    const after = planned(open, tf);
    assert.notEqual(after, plan);
    assert.deepEqual(after, planModel(open, tf));
  });

  it("keeps the plans of the last plannedModels models only", () => {
    const first = planned(fresh(spec("1"), "uid-evicted"), tf);
    assert.equal(planned(fresh(spec("1"), "uid-evicted"), tf), first);
    for (let i = 0; i < plannedModels; i++) planned(fresh(spec("1"), `uid-filler-${i}`), tf);
    const later = planned(fresh(spec("1"), "uid-evicted"), tf);
    assert.notEqual(later, first, "forgotten after plannedModels other models");
    assert.deepEqual(later, first);
  });
});

describe("desired children memoized on their plan", () => {
  const plan = planned(fresh(spec("1"), "uid-children"), tf);

  it("are the same frozen objects for the same inputs, equal to a fresh plan's", () => {
    const fromScratch = planModel(fresh(spec("1"), "uid-children"), tf);
    for (const make of [
      (p: typeof plan) => desiredDeployment(p, owner),
      (p: typeof plan) => desiredService(p, owner),
      (p: typeof plan) => desiredStorage(p, owner),
      (p: typeof plan) => desiredDownloadJob(p, owner, config),
    ]) {
      const child = make(plan);
      assert.equal(make(plan), child);
      assert.ok(Object.isFrozen(child));
      assert.deepEqual(child, make(fromScratch));
      // The applied hash is worked out once, and is the hash of the child as built.
      const hashed = withAppliedHash(child as object);
      assert.equal(withAppliedHash(child as object), hashed);
      assert.deepEqual(hashed, withAppliedHash(structuredClone(child) as object));
    }
  });

  it("are made again for another owner, other replicas or other operator settings", () => {
    assert.notEqual(desiredService(plan, { ...owner, uid: "uid-2" }), desiredService(plan, owner));
    assert.equal(
      desiredService(plan, { ...owner, uid: "uid-2" }).metadata?.ownerReferences?.[0]?.uid,
      "uid-2",
    );
    const other = { downloaderImage: "example.com/mlmodel:2" };
    assert.equal(
      desiredDownloadJob(plan, owner, other)?.spec?.template.spec?.containers[0]?.image,
      other.downloaderImage,
    );
    assert.equal(
      desiredDownloadJob(plan, owner, config)?.spec?.template.spec?.containers[0]?.image,
      config.downloaderImage,
    );
    const scaled = planned(
      fresh(
        { model: { path: "/m" }, image: "me/s:1", autoscaling: { minReplicas: 2, maxReplicas: 5 } },
        "uid-hpa",
      ),
      tf,
    );
    const live = (replicas: number) => ({ deployment: { spec: { replicas, selector: {}, template: {} } } });
    assert.equal(desiredDeployment(scaled, owner, live(3)).spec?.replicas, 3);
    assert.equal(desiredDeployment(scaled, owner, live(4)).spec?.replicas, 4);
    assert.equal(desiredDeployment(scaled, owner, live(3)), desiredDeployment(scaled, owner, live(3)));
  });
});

describe("a reconcile with the memos", () => {
  it("applies a changed spec even when its generation did not move", async () => {
    const w = new World(
      [clusterServingRuntimeKind, tfServing],
      [mlModelKind, mlModel({ model: {}, image: "registry.local/server:1" })],
    );
    await w.reconcile();
    w.settle();
    w.update<MLModel>(mlModelKind, "resnet", (m) => {
      m.spec.image = "registry.local/server:2";
    });
    const { writes } = await w.reconcile();
    assert.ok(writes.includes("apply Deployment/resnet"), writes.join("\n"));
    const applied = w.client.writes.findLast((x) => x.kind.kind === "Deployment")?.body as V1Deployment;
    assert.equal(applied.spec?.template.spec?.containers[0]?.image, "registry.local/server:2");
  });
});
