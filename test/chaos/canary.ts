/**
 * Chaos for canaries: the operator process SIGKILLed at every step of canaries in flight, on a
 * private control plane. Kills land right after each transition the status shows (a random
 * 0-600 ms later: mid-sync, between the children and the status write, between the status and
 * its Event) and right after each promote command is written. Every model must still end
 * promoted, once, with nothing left behind:
 *
 * - no second canary: each canary started once (one startedAt, one CanaryStarted Event);
 * - no double step: status.canary.step never went back and never skipped a step;
 * - no lost promotion: every model whose promote command was written ends Promoted, its new
 *   revision the last ready one, serving every replica;
 * - no orphan: exactly the model's own children are left (no canary Deployment, ReplicaSet,
 *   per-revision Service or pod).
 *
 * `npm run test:chaos -- --only canary` runs it long; canary.short.test.ts inside `npm test`.
 */
import type { V1ReplicaSet } from "@kubernetes/client-node";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../src/api/mlmodel.ts";
import { promoteRequest } from "../../src/cli/commands/promote.ts";
import { labels } from "../../src/operator/names.ts";
import { builtinKinds, type KubeClient, type KubeObject } from "../../src/runtime/index.ts";
import { labelled, servingPods, times } from "../e2e/rollout/canary-helpers.ts";
import { driverFieldManager, seededRandom, sleep } from "./churn.ts";
import { waitReady } from "./operator-process.ts";
import { chaosNamespace, type Log, stage } from "./scenarios.ts";

export interface CanaryKillResult {
  models: number;
  kills: number;
  /** Operator processes that exited on their own (not by our signal). */
  crashes: number;
  /** Kills that landed within 600 ms after a transition the status showed, or after a command. */
  killsAfterTransition: number;
  killsAfterCommand: number;
  promoted: number;
  /** Models whose promote command was written that did not end Promoted on their new revision. */
  lostPromotions: number;
  /** Models whose canary started more than once (startedAt changed, or CanaryStarted twice). */
  secondCanaries: number;
  /** Models whose status.canary.step went back or skipped one. */
  doubleSteps: number;
  /** Objects left beyond each model's own children. */
  orphans: string[];
  problems: string[];
}

const replicas = 3;
const steps: NonNullable<NonNullable<MLModelSpec["rollout"]>["canary"]> = {
  steps: [
    { trafficPercent: 34, pause: { durationSeconds: 2 } },
    { trafficPercent: 67, pause: {} },
  ],
};
const spec = (tag: string): MLModelSpec => ({
  image: `registry.example.com/chaos/server:${tag}`,
  model: { path: "/models/chaos" },
  replicas,
  rollout: { canary: steps },
});

/** What the observer saw of one model's canary. */
interface Seen {
  steps: number[];
  startedAt: Set<string>;
  revision?: string;
  commanded: boolean;
  last: string;
}

export async function canaryKillScenario(opts: {
  models: number;
  kills: number;
  seed: number;
  log: Log;
  timeoutMs?: number;
}): Promise<CanaryKillResult> {
  const s = await stage("chaos-canary", opts.models * 12 + 50);
  const random = seededRandom(opts.seed);
  const names = Array.from({ length: opts.models }, (_, i) => `canary-${i}`);
  const seen = new Map<string, Seen>(
    names.map((n) => [n, { steps: [], startedAt: new Set(), commanded: false, last: "" }]),
  );
  const result = { crashes: 0, kills: 0, killsAfterTransition: 0, killsAfterCommand: 0 };
  try {
    let op = await s.start();
    await waitReady(op);
    const admin = s.admin;
    const get = (name: string) => admin.get<MLModel>(mlModelKind, { namespace: chaosNamespace, name });
    for (const name of names)
      await admin.apply(
        mlModelKind,
        {
          apiVersion: "serving.mlmodel.dev/v1alpha1",
          kind: "MLModel",
          metadata: { name, namespace: chaosNamespace },
          spec: spec("1"),
        } as KubeObject,
        { fieldManager: driverFieldManager, force: true },
      );
    for (const name of names)
      await waitFor(async () => (await get(name))?.status?.phase === "Ready", 300_000, `${name} Ready`);
    opts.log(`canary: ${opts.models} models ready on v1; starting their canaries`);

    let killPending = false;
    // One kill at a time (a kill after a command may come while one after a transition waits).
    let killing: Promise<void> = Promise.resolve();
    /** SIGKILL and restart at once (no wait for readiness: the next kill may land mid-list). */
    const kill = (why: "transition" | "command"): Promise<void> => {
      killing = killing.then(async () => {
        if (result.kills >= opts.kills) return;
        result.kills++;
        if (why === "transition") result.killsAfterTransition++;
        else result.killsAfterCommand++;
        if (!op.alive) result.crashes++;
        await op.kill("SIGKILL");
        op = await s.start();
        opts.log(`canary: kill ${result.kills}/${opts.kills} after a ${why}: restarted as pid ${op.pid}`);
      });
      return killing;
    };
    // Transitions come first and often: they leave the last kill to a command until one came,
    // or a run could spend every kill on them (a CI run did: 6 after transitions, 0 after a command).
    const killSoon = (why: "transition" | "command", delayMs: number) => {
      const forTransitions = result.killsAfterCommand === 0 ? opts.kills - 1 : opts.kills;
      if (killPending || result.kills >= forTransitions) return;
      killPending = true;
      void sleep(delayMs)
        .then(() => kill(why))
        .finally(() => {
          killPending = false;
        });
    };

    for (const name of names)
      await admin.patch(
        mlModelKind,
        { namespace: chaosNamespace, name },
        { spec: { image: spec("2").image } },
        "merge",
      );

    // The observer, killer and driver: one loop over the models.
    const deadline = Date.now() + (opts.timeoutMs ?? 600_000);
    const done = new Set<string>();
    while (done.size < names.length && Date.now() < deadline) {
      for (const [i, name] of names.entries()) {
        if (done.has(name)) continue;
        const m = await get(name).catch(() => undefined);
        const c = m?.status?.canary;
        const w = seen.get(name)!;
        if (c?.revision) {
          w.revision = c.revision;
          if (c.startedAt) w.startedAt.add(c.startedAt);
          if (c.step !== undefined && w.steps.at(-1) !== c.step) w.steps.push(c.step);
        }
        const line = `${c?.phase} ${c?.step} ${m?.status?.revision?.lastReady}`;
        if (c?.phase && line !== w.last) {
          w.last = line;
          killSoon("transition", random() * 600);
        }
        // Even models: resume the indefinite pause of step 2 (then promoted after the last
        // step); odd ones: promote as soon as their canary runs.
        const ready =
          i % 2 === 0
            ? c?.phase === "Paused" && c.step === 1
            : c?.phase === "Progressing" || c?.phase === "Paused";
        if (m && ready && !w.commanded) {
          const request = promoteRequest(m, { step: i % 2 === 0 });
          if (!("error" in request)) {
            await admin
              .patch(
                mlModelKind,
                { namespace: chaosNamespace, name },
                {
                  metadata: {
                    resourceVersion: m.metadata.resourceVersion,
                    annotations: { [request.key]: request.value },
                  },
                },
                "merge",
              )
              .then(
                () => {
                  w.commanded = true;
                  // The first command always, the others at random.
                  if (result.killsAfterCommand === 0 || random() < 0.5) void kill("command");
                },
                () => {},
              );
          }
        }
        const serving = m?.status?.revision?.serving ?? [];
        if (
          c?.phase === "Promoted" &&
          m?.status?.revision?.lastReady === c.revision &&
          serving.length === 1 &&
          serving[0]?.readyReplicas === replicas
        )
          done.add(name);
      }
      await sleep(150);
    }
    while (killPending) await sleep(100);
    await killing;
    if (!op.alive) result.crashes++;
    await waitReady(op, 300_000);
    opts.log(
      `canary: ${done.size}/${names.length} promoted after ${result.kills} kills; checking what is left`,
    );
    // Garbage collection of the canaries' Deployments, ReplicaSets and pods takes a moment.
    const check = () => checkLeft(admin, names, seen);
    let left = await check();
    for (let i = 0; i < 60 && left.orphans.length > 0; i++) {
      await sleep(1000);
      left = await check();
    }
    const problems: string[] = [...left.problems];
    let secondCanaries = 0;
    let doubleSteps = 0;
    let lostPromotions = 0;
    for (const name of names) {
      const w = seen.get(name)!;
      const started = left.started.get(name) ?? 0;
      if (w.startedAt.size > 1 || started > 1) {
        secondCanaries++;
        problems.push(
          `${name}: canary started ${w.startedAt.size} time(s) (startedAt), ${started} CanaryStarted Event(s)`,
        );
      }
      const back = w.steps.some((step, k) => k > 0 && (step < w.steps[k - 1]! || step > w.steps[k - 1]! + 1));
      if (back) {
        doubleSteps++;
        problems.push(`${name}: steps seen ${w.steps.join(" -> ")}`);
      }
      if (w.commanded && !done.has(name)) {
        lostPromotions++;
        problems.push(`${name}: commanded, not promoted (last: ${w.last})`);
      }
    }
    return {
      models: opts.models,
      ...result,
      promoted: done.size,
      lostPromotions,
      secondCanaries,
      doubleSteps,
      orphans: left.orphans,
      problems,
    };
  } finally {
    await s.stop();
  }
}

async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

/** What is left of each model: anything beyond its own children, and its canary Events. */
async function checkLeft(
  admin: KubeClient,
  names: readonly string[],
  seen: ReadonlyMap<string, Seen>,
): Promise<{ orphans: string[]; problems: string[]; started: Map<string, number> }> {
  const orphans: string[] = [];
  const problems: string[] = [];
  const started = new Map<string, number>();
  const events = (
    await admin.list<
      KubeObject & {
        reason?: string;
        note?: string;
        regarding?: { name?: string };
        series?: { count?: number };
      }
    >(builtinKinds.Event, { namespace: chaosNamespace })
  ).items;
  for (const name of names) {
    const revision = seen.get(name)?.revision;
    const mine = await labelled(admin, chaosNamespace, name);
    const revisions = mine.ControllerRevision?.length ?? 0;
    const expected = { Deployment: [name], PodDisruptionBudget: [name], Service: [name] };
    for (const [kind, list] of Object.entries(mine)) {
      if (kind === "ControllerRevision") continue;
      const want = expected[kind as keyof typeof expected] ?? [];
      for (const n of list) if (!want.includes(n)) orphans.push(`${kind}/${n}`);
    }
    if (revisions !== 2) problems.push(`${name}: ${revisions} ControllerRevisions (2 expected)`);
    const sets = (
      await admin.list<KubeObject & V1ReplicaSet>(builtinKinds.ReplicaSet, {
        namespace: chaosNamespace,
        labelSelector: `${labels.model}=${name}`,
      })
    ).items;
    for (const rs of sets)
      if (!rs.metadata.ownerReferences?.some((o) => o.name === name))
        orphans.push(`ReplicaSet/${rs.metadata.name}`);
    const pods = await servingPods(admin, chaosNamespace, name);
    if (pods.join() !== times(replicas, `${revision} ready`).join())
      orphans.push(`${name} pods: ${pods.join(", ")}`);
    const about = events.filter((e) => e.regarding?.name === name);
    started.set(
      name,
      about.filter((e) => e.reason === "CanaryStarted").reduce((n, e) => n + (e.series?.count ?? 1), 0),
    );
  }
  return { orphans, problems, started };
}
