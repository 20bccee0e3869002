import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { MLModelStatus } from "../../../src/api/mlmodel.ts";
import { labels } from "../../../src/operator/names.ts";
import {
  desiredRevision,
  historyEntries,
  revisionsToPrune,
  rollbackTarget,
  specWithScaling,
  withRevisionNumbers,
} from "../../../src/operator/revisions.ts";
import { model } from "./fixtures.ts";

const owner = { apiVersion: "serving.mlmodel.dev/v1alpha1", kind: "MLModel", name: "resnet", uid: "uid-1" };

function rev(hash: string, revision: number, uri = `s3://b/${hash}`): V1ControllerRevision {
  return {
    metadata: { name: `resnet-${hash}`, labels: { [labels.revision]: hash } },
    data: { spec: { model: { uri } } },
    revision,
  };
}

const status = (
  current: string,
  lastReady: string,
  phase: MLModelStatus["phase"] = "Ready",
): MLModelStatus => ({
  phase,
  revision: { current, lastReady },
});

describe("revisions", () => {
  const m = model({ model: { uri: "s3://b/new" }, replicas: 3 });
  it("a new hash becomes the next number, without scaling in its spec", () => {
    const want = desiredRevision(m, "c", owner, [rev("a", 1), rev("b", 2)]);
    assert.equal(want?.revision, 3);
    assert.equal(want?.metadata?.name, "resnet-c");
    assert.deepEqual(want?.data, { spec: { model: { uri: "s3://b/new" } } });
  });
  it("the newest revision is not rewritten; an older one served again is renumbered with its recorded spec", () => {
    assert.equal(desiredRevision(m, "b", owner, [rev("a", 1), rev("b", 2)]), undefined);
    const again = desiredRevision(m, "a", owner, [rev("a", 1), rev("b", 2)]);
    assert.equal(again?.revision, 3);
    assert.deepEqual(again?.data, { spec: { model: { uri: "s3://b/a" } } });
  });
  it("prunes the oldest beyond the limit, never the served or last ready one", () => {
    const all = [rev("a", 1), rev("b", 2), rev("c", 3), rev("d", 4)];
    assert.deepEqual(
      revisionsToPrune(all, 2, new Set(["d", "c"])).map((r) => r.revision),
      [2, 1],
    );
    assert.deepEqual(
      revisionsToPrune(all, 2, new Set(["d", "a"])).map((r) => r.revision),
      [2],
    );
  });
  it("status numbers and what is rolling out", () => {
    const revs = [rev("a", 1), rev("b", 2)];
    const rolling = withRevisionNumbers(status("b", "a", "Deploying"), revs).revision;
    assert.deepEqual(rolling, {
      current: "b",
      lastReady: "a",
      currentNumber: 2,
      lastReadyNumber: 1,
      rollingOut: "b",
    });
    assert.equal(withRevisionNumbers(status("b", "b"), revs).revision?.rollingOut, undefined);
  });
  it("history marks serving, rolling out and last ready", () => {
    const revs = [rev("a", 1), rev("b", 2)];
    assert.deepEqual(
      historyEntries(revs, status("b", "a", "Deploying")).map((e) => [e.number, e.marks]),
      [
        [2, ["rolling out"]],
        [1, ["last ready"]],
      ],
    );
  });
  it("rollback target: explicit number, else last ready, else the one before current", () => {
    const revs = [rev("a", 1), rev("b", 2), rev("c", 3)];
    assert.equal((rollbackTarget(revs, status("c", "c"), 1) as V1ControllerRevision).revision, 1);
    assert.match((rollbackTarget(revs, status("c", "c"), 9) as { error: string }).error, /no revision 9/);
    assert.equal((rollbackTarget(revs, status("c", "a", "Failed")) as V1ControllerRevision).revision, 1);
    assert.equal((rollbackTarget(revs, status("c", "c")) as V1ControllerRevision).revision, 2);
    assert.ok("error" in rollbackTarget([rev("a", 1)], status("a", "a")));
  });
  it("a rollback keeps the user's scaling", () => {
    assert.deepEqual(
      specWithScaling(
        { model: { uri: "s3://old" }, replicas: 1 },
        { model: { uri: "s3://new" }, replicas: 4 },
      ),
      {
        model: { uri: "s3://old" },
        replicas: 4,
      },
    );
  });
});
