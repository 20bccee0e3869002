import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1ContainerStatus, V1Deployment, V1Pod } from "@kubernetes/client-node";
import { type CanaryHealthInput, canaryHealth } from "../../../../src/operator/canary/health.ts";

const now = "2026-05-01T12:00:00Z";
const secondsAgo = (s: number) => new Date(new Date(now).getTime() - s * 1000).toISOString();

function pod(
  name: string,
  opts: {
    ready?: boolean;
    readySince?: number;
    restarts?: number;
    started?: boolean;
    waiting?: string;
    unschedulable?: boolean;
  } = {},
): V1Pod {
  const container: V1ContainerStatus = {
    name: "server",
    image: "srv:2",
    imageID: "",
    ready: opts.ready ?? true,
    restartCount: opts.restarts ?? 0,
    started: opts.started ?? true,
    state: opts.waiting
      ? { waiting: { reason: opts.waiting, message: "back-off" } }
      : { running: { startedAt: new Date(secondsAgo(600)) } },
  };
  return {
    metadata: { name },
    status: {
      conditions: [
        {
          type: "Ready",
          status: (opts.ready ?? true) ? "True" : "False",
          lastTransitionTime: new Date(secondsAgo(opts.readySince ?? 300)),
        },
        ...(opts.unschedulable
          ? [
              {
                type: "PodScheduled",
                status: "False",
                reason: "Unschedulable",
                message: "0/3 nodes: Insufficient nvidia.com/gpu",
              },
            ]
          : []),
      ],
      containerStatuses: opts.unschedulable ? [] : [container],
    },
  } as V1Pod;
}

const base: CanaryHealthInput = { pods: [], maxRestarts: 2, maxUnreadySeconds: 60, now };
const stuck: V1Deployment = {
  metadata: { name: "resnet-canary" },
  spec: { progressDeadlineSeconds: 600, selector: {}, template: {} },
  status: { conditions: [{ type: "Progressing", status: "False", reason: "ProgressDeadlineExceeded" }] },
};

// [what, input, reason (undefined: healthy), words of the message]
const cases: [string, Partial<CanaryHealthInput>, string | undefined, RegExp?][] = [
  ["no pods yet (starting)", {}, undefined],
  ["ready pods", { pods: [pod("c-1"), pod("c-2")] }, undefined],
  [
    "restarts within maxRestarts",
    { pods: [pod("c-1", { restarts: 1 }), pod("c-2", { restarts: 1 })] },
    undefined,
  ],
  [
    "restarts beyond maxRestarts (in total over the canary's pods)",
    { pods: [pod("c-1", { restarts: 2 }), pod("c-2", { restarts: 1 })] },
    "TooManyRestarts",
    /restarted 3 times \(spec.rollout.canary.maxRestarts is 2\)/,
  ],
  [
    "maxRestarts 0 and one restart",
    { maxRestarts: 0, pods: [pod("c-1", { restarts: 1 })] },
    "TooManyRestarts",
  ],
  [
    "a crash loop",
    { pods: [pod("c-1", { waiting: "CrashLoopBackOff", ready: false, restarts: 1 })] },
    "CrashLoopBackOff",
    /canary container server of pod c-1 keeps crashing/,
  ],
  [
    "an image that cannot be pulled",
    { pods: [pod("c-1", { waiting: "ErrImagePull", ready: false, started: false })] },
    "ImagePullBackOff",
  ],
  [
    "a started replica failing its readiness probe for longer than maxUnreadySeconds",
    { pods: [pod("c-1", { ready: false, readySince: 90 })] },
    "ReadinessProbeFailing",
    /c-1 has failed its readiness probe for 90s \(spec.rollout.canary.maxUnreadySeconds is 60\)/,
  ],
  [
    "a started replica unready for a moment",
    { pods: [pod("c-1", { ready: false, readySince: 20 })] },
    undefined,
  ],
  [
    "a replica still starting (startup probe not passed) is not a readiness failure",
    { pods: [pod("c-1", { ready: false, readySince: 900, started: false })] },
    undefined,
  ],
  ["unschedulable pods wait for capacity", { pods: [pod("c-1", { unschedulable: true })] }, undefined],
  [
    "a Deployment past its progress deadline",
    { deployment: stuck },
    "ProgressDeadlineExceeded",
    /resnet-canary made no progress within 600s/,
  ],
  [
    "a failed download",
    { downloadFailure: "403 Forbidden from s3://b/v2" },
    "DownloadFailed",
    /download failed: 403/,
  ],
];

describe("canary health", () => {
  for (const [what, input, reason, words] of cases) {
    it(`${what}: ${reason ?? "healthy"}`, () => {
      const health = canaryHealth({ ...base, ...input });
      if (reason === undefined) {
        assert.deepEqual(health, { healthy: true });
        return;
      }
      assert.equal(health.healthy, false);
      if (health.healthy) return;
      assert.equal(health.reason, reason);
      if (words) assert.match(health.message, words);
    });
  }
  it("ignores pods being deleted", () => {
    const gone = pod("c-1", { restarts: 9 });
    gone.metadata!.deletionTimestamp = new Date(now);
    assert.deepEqual(canaryHealth({ ...base, pods: [gone] }), { healthy: true });
  });
});
