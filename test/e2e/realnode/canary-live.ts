/**
 * What the real-node canary files share: a model's serving pods as kube-proxy sees them, a
 * split judged against live traffic, and the end of a canary (which revision answers after).
 * Counts and ratios only: nothing here asserts how long anything took.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { inferV2, type SampleModel } from "../../../src/images/sample-model.ts";
import { trackLabel } from "../../../src/operator/canary/desired.ts";
import { labels } from "../../../src/operator/names.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { waitFor } from "../../harness/cluster.ts";
import { checkShare, describeShare } from "../../harness/share.ts";
import { Traffic, type TrafficReport, versionClassifier } from "../../harness/traffic.ts";
import { isReady, repoRoot } from "../operator/helpers.ts";
import { endpointOf, firstAnswer, type RealNodeBed, waitForModel } from "./fixture.ts";
import { assertNoFailures, moreAnswers } from "./live-traffic.ts";

/** The model, its replicas and the traffic of the real-node canary files. */
export const canaryTraffic = {
  name: "iris",
  replicas: 4,
  ratePerSecond: 30,
  /** Requests judged for each split's share. */
  sharedRequests: 1500,
  // Bounds: a file sends at most this many requests, for at most this long.
  maxDurationMs: 25 * 60_000,
} as const;

/** A serving pod as kube-proxy sees it: its revision, canary or not, ready, terminating. */
export interface ServingPod {
  name: string;
  revision: string;
  canary: boolean;
  ready: boolean;
  terminating: boolean;
}

/** Every serving pod of the model, terminating ones too: they may still hold endpoints. */
export async function servingPods(bed: RealNodeBed, name: string): Promise<ServingPod[]> {
  const list = await bed.admin.list<
    KubeObject & { status?: { conditions?: { type: string; status: string }[] } }
  >(builtinKinds.Pod, {
    namespace: bed.ns.name,
    labelSelector: `${labels.model}=${name},${labels.component}=server`,
  });
  return list.items
    .map((p) => ({
      name: p.metadata.name!,
      revision: p.metadata.labels?.[labels.revision] ?? "",
      canary: p.metadata.labels?.[trackLabel] === "canary",
      ready: isReady(p),
      terminating: Boolean(p.metadata.deletionTimestamp),
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * The model's pods and Deployments in one line, for a wait that timed out: which pod stayed,
 * in which phase, since when it is terminating, what its containers say, and what each
 * Deployment asks for. A CI log is all a failed run leaves.
 */
export async function describeServing(bed: RealNodeBed, name: string): Promise<string> {
  type PodLike = KubeObject & {
    status?: {
      phase?: string;
      containerStatuses?: { name: string; state?: Record<string, { reason?: string }> }[];
    };
  };
  const selector = { namespace: bed.ns.name, labelSelector: `${labels.model}=${name}` };
  const [pods, deployments] = await Promise.all([
    bed.admin.list<PodLike>(builtinKinds.Pod, selector),
    bed.admin.list<KubeObject & { spec?: { replicas?: number }; status?: { readyReplicas?: number } }>(
      builtinKinds.Deployment,
      selector,
    ),
  ]);
  const podLines = pods.items.map((p) => {
    const states = (p.status?.containerStatuses ?? []).map((c) => {
      const [state, detail] = Object.entries(c.state ?? {})[0] ?? ["unknown", {}];
      return `${c.name}=${state}${detail.reason ? `(${detail.reason})` : ""}`;
    });
    const deleting = p.metadata.deletionTimestamp ? ` deleting since ${p.metadata.deletionTimestamp}` : "";
    return `pod ${p.metadata.name} rev ${p.metadata.labels?.[labels.revision]} ${p.status?.phase}${deleting} [${states.join(" ")}]`;
  });
  const deploymentLines = deployments.items.map(
    (d) => `deployment ${d.metadata.name} replicas ${d.spec?.replicas} ready ${d.status?.readyReplicas ?? 0}`,
  );
  return [...deploymentLines, ...podLines].join("; ");
}

export interface CanaryUnderTraffic {
  /** Every serving pod of the model, terminating ones too: they may still hold endpoints. */
  servingPods(): Promise<ServingPod[]>;
  /** Waits for `count` more answers; the splits and transitions here take minutes under load. */
  answers(count: number, what: string): Promise<void>;
  /** Runs the CLI against the bed's namespace; returns its stdout. */
  mlmodel(args: string[]): Promise<string>;
  /**
   * Waits for the canary to hold its split (Paused, every replica of both revisions ready, no
   * pod of the model terminating, so the Service's endpoints are exactly those pods), then
   * judges `sharedRequests` answers against that split, read from the status. Returns the
   * paused model.
   */
  measureSplit(label: string, stableReady: number, canaryReady: number): Promise<MLModel>;
  /** Waits until the canary ended as `phase` with `serves` alone on every replica. */
  canaryEnded(phase: "Promoted" | "Aborted", serves: string, version: string): Promise<MLModel>;
  /** Once no pod of `loserRevision` is left (not even terminating), every answer is `winner`'s. */
  onlyAnswers(label: string, winner: string, loserRevision: string): Promise<void>;
}

/** The figures worth a log line (the labels of a split alternate too often to print). */
export const figures = ({ sent, served, failed, dropped, byLabel, latencyMs }: TrafficReport) =>
  JSON.stringify({ sent, served, failed, dropped, byLabel, latencyMs });

export function canaryUnderTraffic(options: {
  bed: RealNodeBed;
  name: string;
  replicas: number;
  traffic: Pick<Traffic<unknown>, "now" | "samples" | "mark" | "report">;
  ratePerSecond: number;
  /** Requests judged for each split's share. */
  sharedRequests: number;
}): CanaryUnderTraffic {
  const { bed, name, replicas, traffic, ratePerSecond, sharedRequests } = options;
  const modelPods = () => servingPods(bed, name);

  const answers = (count: number, what: string) => moreAnswers(traffic, count, what, 10 * 60_000);

  async function mlmodel(args: string[]): Promise<string> {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [join(repoRoot, "src", "cli", "main.ts"), ...args, "-n", bed.ns.name],
      { env: { ...process.env, NO_COLOR: "1", KUBECONFIG: bed.cluster.kubeconfig } },
    );
    return stdout;
  }

  async function measureSplit(label: string, stableReady: number, canaryReady: number): Promise<MLModel> {
    const paused = await waitForModel(bed, name, `canary Paused at ${stableReady} + ${canaryReady}`, (m) => {
      const serving = m.status?.revision?.serving ?? [];
      return (
        m.status?.observedGeneration === m.metadata.generation &&
        m.status?.canary?.phase === "Paused" &&
        serving.find((s) => s.role === "Stable")?.readyReplicas === stableReady &&
        serving.find((s) => s.role === "Canary")?.readyReplicas === canaryReady
      );
    });
    const canary = paused.status!.canary!;
    const steady = async () => {
      const pods = await modelPods();
      const ok =
        pods.length === stableReady + canaryReady &&
        pods.every((p) => p.ready && !p.terminating) &&
        pods.filter((p) => p.canary && p.revision === canary.revision).length === canaryReady &&
        pods.filter((p) => !p.canary && p.revision === canary.stableRevision).length === stableReady;
      return ok ? pods : undefined;
    };
    const podsBefore = await waitFor(`${label}: only the split's pods, all ready`, steady, {
      timeoutMs: 120_000,
      describe: () => describeServing(bed, name),
    });
    // The split from the status: each revision's share of the ready replicas, as the
    // Service spreads requests over them. effectivePercent is that share rounded.
    const serving = paused.status!.revision!.serving!;
    const readyOf = (role: string) => serving.find((s) => s.role === role)!.readyReplicas ?? 0;
    const expected = readyOf("Canary") / (readyOf("Canary") + readyOf("Stable"));
    assert.equal(canary.effectivePercent, Math.round(100 * expected), JSON.stringify(canary));
    // kube-proxy's rules follow the endpoints a moment later: a few answers first.
    await answers(ratePerSecond * 2, `${label}: endpoints settle`);
    traffic.mark(`${label} window`);
    await answers(sharedRequests, `${label}: the split's share`);
    traffic.mark(`${label} window end`);
    // The split held the whole window: same pods, all ready, none leaving.
    assert.deepEqual(await steady(), podsBefore, `${label}: the pods changed during the window`);
    const window = traffic.report(`${label} window`, `${label} window end`);
    assertNoFailures(window, `${label}: the split`);
    const check = checkShare(window.byLabel.v2 ?? 0, window.served, expected);
    console.log(`# ${label}: ${describeShare("v2", check)}; asked ${canary.trafficPercent} %`);
    assert.ok(check.within, `${label}: ${describeShare("v2", check)}`);
    assert.equal((window.byLabel.v1 ?? 0) + (window.byLabel.v2 ?? 0), window.served);
    return paused;
  }

  function canaryEnded(phase: "Promoted" | "Aborted", serves: string, version: string): Promise<MLModel> {
    return waitForModel(bed, name, `canary ${phase}, ${version} on every replica`, (m) => {
      const serving = m.status?.revision?.serving ?? [];
      return (
        m.status?.observedGeneration === m.metadata.generation &&
        m.status?.canary?.phase === phase &&
        serving.length === 1 &&
        serving[0]?.revision === serves &&
        serving[0]?.readyReplicas === replicas
      );
    });
  }

  async function onlyAnswers(label: string, winner: string, loserRevision: string): Promise<void> {
    await waitFor(
      `${label}: no pod of revision ${loserRevision} left`,
      async () => (await modelPods()).every((p) => p.revision !== loserRevision),
      { timeoutMs: 300_000, describe: () => describeServing(bed, name) },
    );
    traffic.mark(`${label} settled`);
    await answers(ratePerSecond * 4, `${label}: ${winner} alone`);
    traffic.mark(`${label} settled end`);
    const tail = traffic.report(`${label} settled`, `${label} settled end`);
    assertNoFailures(tail, `${label}: after`);
    assert.deepEqual(
      Object.keys(tail.byLabel),
      [winner],
      `${label}: answers after the loser's pods left: ${JSON.stringify(tail.byLabel)}`,
    );
  }

  return { servingPods: modelPods, answers, mlmodel, measureSplit, canaryEnded, onlyAnswers };
}

/**
 * Once v1 is Ready on every replica (each pod ready, none terminating) and answers through its
 * Service: live traffic that tells v1's answers from v2's, and the helpers over it.
 */
export async function startCanaryTraffic(
  bed: RealNodeBed,
  v1: SampleModel,
  v2: SampleModel,
): Promise<{
  ready: MLModel;
  traffic: Traffic<unknown>;
  live: CanaryUnderTraffic;
}> {
  const { name, replicas, ratePerSecond, sharedRequests, maxDurationMs } = canaryTraffic;
  const ready = await waitForModel(bed, name, `v1 Ready on ${replicas} pods`, async (m) => {
    const pods = await servingPods(bed, name);
    return (
      m.status?.phase === "Ready" &&
      m.status.observedGeneration === m.metadata.generation &&
      pods.length === replicas &&
      pods.every((p) => p.ready && !p.terminating)
    );
  });
  const endpoint = await endpointOf(bed, ready);
  assert.deepEqual((await firstAnswer(endpoint, v1)).data, v1.predictions);
  const traffic = new Traffic({
    send: () => inferV2(endpoint, name, v1.inputs),
    judge: versionClassifier({ v1: v1.predictions, v2: v2.predictions }),
    ratePerSecond,
    maxRequests: ratePerSecond * (maxDurationMs / 1000),
    maxDurationMs,
  }).start() as Traffic<unknown>;
  const live = canaryUnderTraffic({ bed, name, replicas, traffic, ratePerSecond, sharedRequests });
  await live.answers(ratePerSecond * 2, "v1 serving");
  return { ready, traffic, live };
}
