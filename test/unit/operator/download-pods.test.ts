import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Job } from "@kubernetes/client-node";
import {
  lookAgainBoundsMs,
  lookAgainMs,
  lookNoLongerNeeded,
  needsItsPods,
  readDownloadPods,
} from "../../../src/operator/mlmodel/download-pods.ts";
import type { ListOptions, ResourceKind } from "../../../src/runtime/index.ts";

const now = "2026-01-01T00:10:00Z";
const minutesAgo = (m: number) => new Date(Date.parse(now) - m * 60_000).toISOString();
const job = (status: V1Job["status"], created = minutesAgo(0), component = "download"): V1Job => ({
  metadata: {
    name: `m-${component}`,
    creationTimestamp: created as unknown as Date,
    labels: { "app.kubernetes.io/component": component },
  },
  status,
});
const ended = (type: "Complete" | "Failed", at: string) => ({
  conditions: [{ type, status: "True", lastTransitionTime: at as unknown as Date }],
});

describe("download pods: read only while the Job needs them", () => {
  it("a Job with no pod ready, or failed, needs its pods; one that runs a ready pod or completed does not", () => {
    const needs = (status: V1Job["status"], created = minutesAgo(1)) =>
      needsItsPods(job(status, created), now);
    assert.equal(needs({}), true, "a minute old, its pod not started");
    assert.equal(needs({}, minutesAgo(0)), false, "just created: the first look comes in 5 s");
    assert.equal(needs({}, minutesAgo(5 / 60)), true, "5 s old");
    assert.equal(needs({}, "not a time"), true);
    assert.equal(needs({ active: 1, ready: 0 }), true);
    assert.equal(needs({ active: 1, ready: 1 }), false);
    // Its pod succeeded, the Complete not written yet: nothing to explain.
    assert.equal(needs({ active: 0, ready: 0, uncountedTerminatedPods: { succeeded: ["u"] } }), false);
    assert.equal(needs({ active: 0, ready: 0, succeeded: 1 }), false);
    // A retry after a failed pod waits for its pod again.
    assert.equal(needs({ active: 1, ready: 0, failed: 1 }), true);
    assert.equal(needs({ failed: 1, ...ended("Failed", now) }), true);
    assert.equal(needs({ succeeded: 1, ...ended("Complete", now) }), false);
  });

  it("lists the model's download pods once, and only when one of its Jobs needs them", async () => {
    const lists: string[] = [];
    const client = {
      list: async (kind: ResourceKind, opts?: ListOptions) => {
        lists.push(`${kind.kind} ${opts?.namespace} ${opts?.labelSelector} ${opts?.withoutManagedFields}`);
        return { items: [{ metadata: { name: "m-dl-0" } }], resourceVersion: "1" };
      },
    } as Parameters<typeof readDownloadPods>[0];
    const model = { namespace: "ml", name: "m" };
    const signal = new AbortController().signal;
    const running = job({ active: 1, ready: 1 });
    assert.deepEqual(await readDownloadPods(client, model, [running], now, signal), []);
    assert.deepEqual(await readDownloadPods(client, model, [], now, signal), []);
    const pruning = job({ active: 1, ready: 0 }, minutesAgo(1), "prune");
    assert.deepEqual(
      await readDownloadPods(client, model, [running, pruning, job({ active: 1 })], now, signal),
      [],
    );
    assert.deepEqual(
      lists,
      [],
      "nothing to explain (a prune Job's pods are not download pods; a new Job waits for its look): no request",
    );
    const pods = await readDownloadPods(
      client,
      model,
      [running, job({ active: 1 }, minutesAgo(1))],
      now,
      signal,
    );
    assert.deepEqual(
      pods.map((p) => p.metadata?.name),
      ["m-dl-0"],
    );
    assert.deepEqual(lists, ["Pod ml serving.mlmodel.dev/model=m,app.kubernetes.io/component=download true"]);
  });

  it("looks again after a quarter of the Job's age, between 5 s and 60 s, while no pod is ready", () => {
    assert.equal(lookAgainMs(job({ active: 1 }, minutesAgo(0)), now), lookAgainBoundsMs.min);
    assert.equal(lookAgainMs(job({ active: 1 }, minutesAgo(2)), now), 30_000);
    assert.equal(lookAgainMs(job({ active: 1 }, minutesAgo(9)), now), lookAgainBoundsMs.max);
    assert.equal(lookAgainMs(job({ active: 1 }, "not a time"), now), lookAgainBoundsMs.min);
    assert.equal(lookAgainMs(job({ active: 1, ready: 1 }), now), undefined);
    assert.equal(lookAgainMs(job({ succeeded: 1 }), now), undefined, "its Complete follows");
    assert.equal(lookAgainMs(job({ failed: 1, ...ended("Failed", now) }), now), undefined);
    assert.equal(lookAgainMs(undefined, now), undefined);
  });

  it("a look asked for is withdrawn once the Job has a pod ready or ended within the longest wait", () => {
    assert.equal(lookNoLongerNeeded(job({ active: 1, ready: 1 }), now), true);
    assert.equal(lookNoLongerNeeded(job({ active: 1, ready: 0 }), now), false);
    assert.equal(
      lookNoLongerNeeded(job({ ready: 0, uncountedTerminatedPods: { succeeded: ["u"] } }), now),
      true,
    );
    assert.equal(lookNoLongerNeeded(job(ended("Complete", minutesAgo(0.5))), now), true);
    assert.equal(lookNoLongerNeeded(job(ended("Failed", minutesAgo(0.5))), now), true);
    assert.equal(lookNoLongerNeeded(job(ended("Complete", minutesAgo(5))), now), false, "long over");
    assert.equal(lookNoLongerNeeded(job({ conditions: [{ type: "Complete", status: "True" }] }), now), false);
    assert.equal(lookNoLongerNeeded(undefined, now), false);
  });
});
