/**
 * Automatic rollback end to end (spec.rollout.autoRollback, on by default), the operator under
 * its own RBAC: a new revision that fails (a download that fails, pods that crash-loop, a
 * rollout past its progress deadline; failures injected with the kwok stages) leaves the last
 * ready revision serving, with no moment without a ready pod; a RolledBack condition and a
 * Warning event name the failed revision and why; the spec stays as written; fixing it rolls
 * forward.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import type { KubeClient } from "../../../src/runtime/index.ts";
import { type TestNamespace, waitFor } from "../../harness/cluster.ts";
import {
  applyObjects,
  eventsFor,
  getModel,
  operatorTestBed,
  podsOf,
  provideVolume,
  type RunningOperator,
  removeTestBed,
  waitForPhase,
} from "../operator/helpers.ts";
import { sampleReadyPods } from "./sampler.ts";

const image = "registry.example.com/team/server:1";

describe("automatic rollback", { concurrency: true }, () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let operator: RunningOperator;
  const volumes: string[] = [];

  async function serving(name: string, spec: MLModelSpec): Promise<MLModel> {
    await applyObjects(admin, ns.name, [
      { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", metadata: { name }, spec },
    ]);
    return waitForPhase(admin, ns.name, name, "Ready");
  }

  /** Breaks the model with `bad`, proves the rollback, then fixes it with `good` and proves the roll forward. */
  async function rollbackThenForward(
    name: string,
    good: MLModel,
    bad: unknown,
    reason: string,
    fix: unknown,
  ): Promise<void> {
    const lastReady = good.status?.revision?.current;
    const sampler = sampleReadyPods(admin, ns.name, name);
    await admin.patch(mlModelKind, { namespace: ns.name, name }, bad, "merge");
    const rolledBack = await waitFor(
      `${name} to roll back after ${reason}`,
      async () => {
        const m = await getModel(admin, ns.name, name);
        const c = m?.status?.conditions?.find((x) => x.type === "RolledBack");
        return c?.status === "True" && m?.status?.phase === "Ready" ? m : undefined;
      },
      { timeoutMs: 180_000 },
    );
    const s = rolledBack.status!;
    assert.equal(s.reason, "RolledBack");
    assert.equal(s.revision?.current, lastReady, "the last ready revision serves");
    assert.equal(s.revision?.failed?.reason, reason);
    assert.notEqual(s.revision?.failed?.revision, lastReady);
    assert.equal(s.revision?.failed?.number, 2);
    assert.match(
      s.message ?? "",
      new RegExp(`revision 2 \\(${s.revision?.failed?.revision}\\) failed \\(${reason}\\)`),
    );
    // Only pods of the last ready revision serve.
    await waitFor(`${name}'s pods to be the last ready revision's only`, async () => {
      const pods = await podsOf(admin, ns.name, name);
      return (
        pods.length > 0 &&
        pods.every((p) => p.metadata.labels?.["serving.mlmodel.dev/revision"] === lastReady)
      );
    });
    const event = await waitFor("a RolledBack Warning event", async () =>
      (await eventsFor(admin, ns.name, name)).find((e) => e.reason === "RolledBack" && e.type === "Warning"),
    );
    assert.match(event.note, new RegExp(`revision 2 .*${reason}`));
    const counts = await sampler.stop();
    assert.ok(Math.min(...counts) >= 1, `ready pods seen: ${counts.join(",")}`);
    // The spec stays as the user wrote it.
    const now = (await getModel(admin, ns.name, name))!;
    assert.deepEqual(now.spec, { ...good.spec, ...mergeSpec(good.spec, bad) });

    await admin.patch(mlModelKind, { namespace: ns.name, name }, fix, "merge");
    const forward = await waitFor(`${name} to roll forward`, async () => {
      const m = await waitForPhase(admin, ns.name, name, "Ready");
      return m.status?.revision?.current !== lastReady && m.status?.reason === "Serving" ? m : undefined;
    });
    assert.equal(forward.status?.revision?.failed, undefined);
    assert.equal(
      forward.status?.conditions?.find((c) => c.type === "RolledBack"),
      undefined,
    );
  }

  before(async () => {
    ({ ns, admin, operator } = await operatorTestBed("e2e-autorollback"));
  });

  after(() => removeTestBed({ ns, admin, operator }, volumes));

  it("a download that fails: the served version keeps serving", async () => {
    volumes.push(await provideVolume(admin, ns.name, "dl-model"));
    const good = await serving("dl", {
      model: { uri: "https://models.example.com/m/v1.tgz", format: "tensorflow" },
    });
    await rollbackThenForward(
      "dl",
      good,
      { spec: { model: { uri: "https://models.example.com/simulate-job-failure/v2.tgz" } } },
      "DownloadFailed",
      { spec: { model: { uri: "https://models.example.com/m/v2.tgz" } } },
    );
  });

  it("pods that crash-loop before they serve (the runtime cannot load the model): back to the last ready image", async () => {
    const good = await serving("crash", { image, model: { path: "/models/m" } });
    await rollbackThenForward(
      "crash",
      good,
      { spec: { image: "registry.example.com/simulate-crash-loop:2" } },
      "ModelLoadFailed",
      { spec: { image: "registry.example.com/team/server:2" } },
    );
  });

  it("a rollout past its progress deadline: back to the last ready image", async () => {
    const good = await serving("stuck", {
      image,
      model: { path: "/models/m" },
      rollout: { progressDeadlineSeconds: 30 },
    });
    await rollbackThenForward(
      "stuck",
      good,
      { spec: { image: "registry.example.com/simulate-never-ready:2" } },
      "ProgressDeadlineExceeded",
      { spec: { image: "registry.example.com/team/server:2" } },
    );
  });

  it("autoRollback false: the failure is reported and nothing is rolled back", async () => {
    const good = await serving("manual", {
      image,
      model: { path: "/models/m" },
      rollout: { autoRollback: false },
    });
    await admin.patch(
      mlModelKind,
      { namespace: ns.name, name: "manual" },
      { spec: { image: "registry.example.com/simulate-crash-loop:2" } },
      "merge",
    );
    const failed = await waitForPhase(admin, ns.name, "manual", "Failed", "ModelLoadFailed");
    assert.notEqual(failed.status?.revision?.current, good.status?.revision?.current);
    assert.equal(failed.status?.revision?.failed, undefined);
    assert.equal(failed.status?.revision?.lastReady, good.status?.revision?.current);
  });
});

/** The spec after a merge patch of plain objects (what the API server stored). */
function mergeSpec(spec: MLModelSpec, patch: unknown): MLModelSpec {
  const merge = (a: unknown, b: unknown): unknown =>
    b && typeof b === "object" && !Array.isArray(b) && a && typeof a === "object" && !Array.isArray(a)
      ? Object.fromEntries(
          [...new Set([...Object.keys(a), ...Object.keys(b)])].map((k) => [
            k,
            k in (b as object)
              ? merge((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])
              : (a as Record<string, unknown>)[k],
          ]),
        )
      : b;
  return merge(spec, (patch as { spec: unknown }).spec) as MLModelSpec;
}
