/**
 * The reliability scenarios, each on a PRIVATE control plane of its own (faults never reach
 * the tests running beside them). Each returns figures; the short tests (faults.short.test.ts,
 * input.short.test.ts) and `npm run test:chaos` (scripts/chaos.ts) run them at two sizes and
 * assert on the figures.
 */
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { mlModelKind } from "../../src/api/kinds.ts";
import type { MLModel } from "../../src/api/mlmodel.ts";
import { defaultOperatorNamespace } from "../../src/install/manifests.ts";
import { leaseName } from "../../src/operator/run.ts";
import {
  builtinKinds,
  type KubeClient,
  type KubeObject,
  type ResourceKind,
} from "../../src/runtime/index.ts";
import { type PrivateCluster, startPrivateCluster } from "../harness/cluster.ts";
import {
  Churn,
  type ConvergenceReport,
  checkConvergence,
  type ModelWish,
  prepareCluster,
  seededRandom,
  sleep,
  waitConverged,
} from "./churn.ts";
import {
  metricSum,
  OperatorProcess,
  type OperatorProcessOptions,
  operatorKubeconfig,
  operatorUser,
  waitReady,
} from "./operator-process.ts";

export const chaosNamespace = "chaos";
export type Log = (line: string) => void;

/** A private cluster prepared for the operator, with helpers to start operator processes. */
export interface Stage {
  cluster: PrivateCluster;
  admin: KubeClient;
  logFile: string;
  start(extra?: Partial<OperatorProcessOptions>): Promise<OperatorProcess>;
  stop(): Promise<void>;
}

export async function stage(name: string, podCapacity?: number): Promise<Stage> {
  const cluster = await startPrivateCluster(name);
  const running: OperatorProcess[] = [];
  try {
    const admin = await prepareCluster(cluster, chaosNamespace, podCapacity);
    const logFile = join(cluster.dir, "operator.log");
    let tokens = 0;
    return {
      cluster,
      admin,
      logFile,
      async start(extra = {}) {
        const dir = join(cluster.dir, `operator-${tokens++}`);
        const kubeconfig = await operatorKubeconfig(admin, cluster.kubeConfig(), dir);
        const op = await OperatorProcess.start({ kubeconfig, namespace: chaosNamespace, logFile, ...extra });
        running.push(op);
        return op;
      },
      async stop() {
        for (const op of running) await op.kill("SIGKILL");
        // Keep the operator's log for a look after a failure (the cluster dir goes).
        const kept = join(tmpdir(), "mlmodel-chaos-logs");
        mkdirSync(kept, { recursive: true });
        copyFileSync(logFile, join(kept, `${name}-${Date.now()}.log`));
        await cluster.stop();
      },
    };
  } catch (err) {
    await cluster.stop();
    throw err;
  }
}

/** Runs `op` with `parallel` workers until `count` calls are done or `until()` says stop. */
async function drive(parallel: number, count: number, op: () => Promise<void>, until?: () => boolean) {
  let done = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (done < count || (until && !until())) {
        done++;
        await op();
      }
    }),
  );
}

/** JSON log lines of the operator at level error or above, and crash traces. */
export function operatorErrors(logFile: string): string[] {
  let text = "";
  try {
    text = readFileSync(logFile, "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .filter((l) => /"level":(50|60)|Uncaught|FATAL|TypeError|ReferenceError/.test(l))
    .slice(0, 20);
}

// ---------------------------------------------------------------- (1) SIGKILL during churn

export interface KillResult {
  models: number;
  kills: number;
  /** Restarts that came back (synced caches, /readyz 200) after the kill. */
  killsSurvived: number;
  /** Processes that exited on their own (not by our signal). */
  crashes: number;
  churn: Churn["stats"];
  report: ConvergenceReport;
  convergeMs: number;
}

export async function killScenario(opts: {
  models: number;
  kills: number;
  seed: number;
  log: Log;
}): Promise<KillResult> {
  const s = await stage("chaos-kill", opts.models * 2 + 100);
  try {
    let op = await s.start();
    await waitReady(op);
    const churn = new Churn(s.admin, chaosNamespace, opts.seed);
    const random = seededRandom(opts.seed + 1);
    let crashes = 0;
    let killsSurvived = 0;
    // The killer: SIGKILL at random moments (0.5 to 6 s apart: mid-list, mid-reconcile, right
    // after start), restarting at once each time, until the planned kills are done.
    const killer = (async () => {
      for (let k = 0; k < opts.kills; k++) {
        await sleep(500 + random() * 5500);
        if (!op.alive) crashes++;
        await op.kill("SIGKILL");
        op = await s.start();
        opts.log(`kill ${k + 1}/${opts.kills}: restarted as pid ${op.pid}`);
      }
    })();
    const creator = drive(8, opts.models, () => churn.create().then(() => {}));
    await creator;
    opts.log(`created ${opts.models} models`);
    // Updates (and some deletes) go on until every kill has happened.
    let killerDone = false;
    void killer.then(() => {
      killerDone = true;
    });
    await drive(
      4,
      opts.models,
      () => churn.step({ create: 0.05, update: 0.9 }),
      () => killerDone,
    );
    await killer;
    await churn.settle();
    // A liveness bound: on a loaded machine a fresh process can take minutes to list 500 models.
    await waitReady(op, 600_000);
    killsSurvived = opts.kills - crashes;
    const { report, waitedMs } = await waitConverged(s.admin, chaosNamespace, churn.wishes, 600_000);
    if (!op.alive) crashes++;
    opts.log(
      `converged=${waitedMs}ms ${JSON.stringify({ ...report, problems: report.problems.slice(0, 5) })}`,
    );
    return {
      models: churn.stats.creates,
      kills: opts.kills,
      killsSurvived,
      crashes,
      churn: churn.stats,
      report,
      convergeMs: waitedMs,
    } satisfies KillResult;
  } finally {
    await s.stop();
  }
}

// ------------------------------------------------- (2) API server restart + etcd compaction

export interface OutageResult {
  operatorExited: boolean;
  /**
   * /readyz and /healthz answers seen during the two short restarts (HTTP code -> count).
   * Shorter than the runtime's 10 s grace period, so /readyz may well stay 200.
   */
  readyz: Record<string, number>;
  healthz: Record<string, number>;
  /** The long outage: readiness sampled while the API server was stopped and after. */
  readiness: ReadinessFigures;
  /** Watch errors the operator logged, and how many of them were 410 Gone (-> relist). */
  watchErrors: number;
  gone410: number;
  /**
   * Watch errors that were refused connections (the API server's port closed), and the longest
   * wait the runtime chose before retrying after one (its own decision, from the log: no clock).
   */
  refused: number;
  refusedMaxRetryMs: number;
  churn: Churn["stats"];
  report: ConvergenceReport;
}

/**
 * What the operator's probes said while the API server was stopped for longer than the
 * runtime's readiness grace period (10 s), and after. Times in ms, measured by polling every
 * 250 ms on a noisy machine: indicative only, never asserted.
 */
export interface ReadinessFigures {
  /** /readyz was 200 when the API server was stopped (false: still failing from before). */
  readyBefore: boolean;
  /** How long the API server's port refused connections (first refused -> accepting again). */
  apiDownMs: number;
  /** Port accepting again -> the harness's health check passed (post-start hooks). */
  apiHealthyAfterMs: number;
  /** /readyz and /healthz codes while the API server was down (0 = no answer within 2 s). */
  readyz: Record<string, number>;
  healthz: Record<string, number>;
  /** /healthz codes from the API server going down until /readyz was 200 again. */
  healthzUntilReady: Record<string, number>;
  /** API server down -> first /readyz that was not 200 (undefined: it stayed 200). */
  notReadyAfterMs: number | undefined;
  /** First /readyz not 200 -> first /readyz 200 again. */
  notReadyForMs: number | undefined;
  /** API server's port accepting again -> first /readyz 200 (undefined: not within 3 min). */
  readyAgainAfterMs: number | undefined;
  /** The body of the first failing /readyz (names the informers and their last error). */
  reason: string | undefined;
}

/** True when something accepts a TCP connection on the API server's port. */
function apiServerListening(server: string): Promise<boolean> {
  const url = new URL(server);
  return new Promise((resolve) => {
    const socket = connect({ host: url.hostname, port: Number(url.port || 443) });
    socket.setTimeout(1000);
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
    socket.once("timeout", () => done(false));
  });
}

/**
 * Stops the API server for `downMs`, sampling the operator's probes and the API server's port
 * every 250 ms, until /readyz is 200 again after the API server came back (at most 3 min).
 */
export async function measureReadiness(
  s: Stage,
  op: OperatorProcess,
  downMs: number,
  log: Log,
): Promise<ReadinessFigures> {
  const server = s.cluster.kubeConfig().getCurrentCluster()?.server;
  if (!server) throw new Error("the private cluster's kubeconfig names no server");
  const samples: { at: number; apiUp: boolean; ready: number; live: number }[] = [];
  let reason: string | undefined;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const [apiUp, ready, live] = await Promise.all([
        apiServerListening(server),
        op.probeText("/readyz"),
        op.probe("/healthz"),
      ]);
      samples.push({ at: Date.now(), apiUp, ready: ready.status, live });
      // The last failure while the port was closed: by then every cache has passed its grace.
      if (!apiUp && ready.status === 500) reason = ready.body.trim();
      await sleep(250);
    }
  })();
  // Start from a ready operator, or the figures mix in the previous fault (after a restart the
  // API server answers 429 "storage is (re)initializing" to some watches for a while).
  const readyBefore = await waitFor(() => samples.at(-1)?.ready === 200, 180_000);
  log(`stopping the API server for ${downMs / 1000} s (operator ready before: ${readyBefore})`);
  const stoppedAt = Date.now();
  await s.cluster.restartApiServer(downMs);
  const apiHealthyAt = Date.now();
  log("API server healthy again; waiting for /readyz 200");
  await waitFor(() => samples.some((x) => x.at >= apiHealthyAt && x.ready === 200), 180_000);
  sampling = false;
  await sampler;
  const outage = samples.filter((x) => x.at >= stoppedAt);
  return { ...readinessFigures(outage, apiHealthyAt, reason), readyBefore };
}

/** Polls `done` every 250 ms for up to `ms`; true when it held. */
async function waitFor(done: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) return false;
    await sleep(250);
  }
  return true;
}

/**
 * Turns probe samples (taken from before the API server went down) into figures. The API
 * server counts as back once its port accepts again: it serves lists and watches before the
 * harness's health check passes (its post-start hooks take a while on a loaded machine).
 */
export function readinessFigures(
  samples: readonly { at: number; apiUp: boolean; ready: number; live: number }[],
  apiHealthyAt: number,
  reason: string | undefined,
): Omit<ReadinessFigures, "readyBefore"> {
  const count = (xs: readonly number[]) => {
    const out: Record<string, number> = {};
    for (const x of xs) out[x] = (out[x] ?? 0) + 1;
    return out;
  };
  const downAt = samples.find((x) => !x.apiUp)?.at ?? apiHealthyAt;
  const backAt = samples.find((x) => x.at > downAt && x.apiUp)?.at ?? apiHealthyAt;
  const down = samples.filter((x) => x.at >= downAt && x.at < backAt);
  const notReadyAt = samples.find((x) => x.at >= downAt && x.ready !== 200)?.at;
  const readyAgainAt = samples.find((x) => x.at >= backAt && x.ready === 200)?.at;
  const untilReady = samples.filter(
    (x) => x.at >= downAt && (readyAgainAt === undefined || x.at < readyAgainAt),
  );
  return {
    apiDownMs: backAt - downAt,
    apiHealthyAfterMs: apiHealthyAt - backAt,
    readyz: count(down.map((x) => x.ready)),
    healthz: count(down.map((x) => x.live)),
    healthzUntilReady: count(untilReady.map((x) => x.live)),
    notReadyAfterMs: notReadyAt === undefined ? undefined : notReadyAt - downAt,
    notReadyForMs:
      notReadyAt === undefined || readyAgainAt === undefined ? undefined : readyAgainAt - notReadyAt,
    readyAgainAfterMs: readyAgainAt === undefined ? undefined : readyAgainAt - backAt,
    reason,
  };
}

export async function outageScenario(opts: {
  models: number;
  seed: number;
  log: Log;
  /** How long the API server stays stopped in the long outage (default 25 s). */
  longOutageMs?: number;
}): Promise<OutageResult> {
  const s = await stage("chaos-outage");
  // The background loops stop in `finally` too: a throw mid-scenario must not leave them
  // running (they kept the test process alive until the runner's timeout).
  let probing = true;
  let churning = true;
  const loops: Promise<void>[] = [];
  try {
    // At debug level: a watch expiry (410) is logged there, and its count is what this reads.
    const op = await s.start({ logLevel: "debug" });
    await waitReady(op);
    const churn = new Churn(s.admin, chaosNamespace, opts.seed);
    await drive(8, opts.models, () => churn.create().then(() => {}));
    await waitConverged(s.admin, chaosNamespace, churn.wishes);
    const readyz: Record<string, number> = {};
    const healthz: Record<string, number> = {};
    let outage = false;
    const prober = (async () => {
      while (probing) {
        const [r, h] = await Promise.all([op.probe("/readyz"), op.probe("/healthz")]);
        if (outage) {
          readyz[r] = (readyz[r] ?? 0) + 1;
          healthz[h] = (healthz[h] ?? 0) + 1;
        }
        await sleep(250);
      }
    })();
    const driver = drive(
      2,
      0,
      () => churn.step({ create: 0.1, update: 0.8 }).then(() => sleep(50)),
      () => !churning,
    );
    loops.push(prober, driver);
    await sleep(3000);
    outage = true;
    opts.log("restarting the API server (3 s down)");
    await s.cluster.restartApiServer(3000);
    await sleep(3000);
    // Compaction, then a restart that empties the API server's watch cache: every watch that
    // resumes from a resourceVersion before the compaction gets 410 Gone and must relist.
    const rev = await s.cluster.compactEtcd();
    opts.log(`compacted etcd at revision ${rev}; restarting the API server again`);
    await s.cluster.restartApiServer(1000);
    await sleep(5000);
    outage = false;
    // Longer than the readiness grace period: /readyz must show it, /healthz must not.
    const readiness = await measureReadiness(s, op, opts.longOutageMs ?? 25_000, opts.log);
    churning = false;
    await driver;
    probing = false;
    await prober;
    await churn.settle();
    const { report } = await waitConverged(s.admin, chaosNamespace, churn.wishes);
    const logText = readFileSync(s.logFile, "utf8");
    // Every watch error the runtime met, whatever level and words its log line chose: the
    // lines its informers log from onError carry the cache and the wait before the retry.
    const watchErrors = logText.split("\n").filter((l) => l.includes('"retryInMs"') && l.includes('"cache"'));
    const refusedWaits = watchErrors
      .filter((l) => l.includes("ECONNREFUSED"))
      .map((l) => (JSON.parse(l) as { retryInMs: number }).retryInMs);
    return {
      operatorExited: !op.alive,
      readyz,
      healthz,
      readiness,
      watchErrors: watchErrors.length,
      gone410: watchErrors.filter((l) => /"code":410|Gone|Expired|too old/.test(l)).length,
      refused: refusedWaits.length,
      refusedMaxRetryMs: Math.max(0, ...refusedWaits),
      churn: churn.stats,
      report,
    };
  } finally {
    probing = false;
    churning = false;
    await Promise.allSettled(loops);
    await s.stop();
  }
}

// -------------------------------------------------------------------- (3) leader election

interface AuditEvent {
  verb: string;
  user: { username: string; extra?: Record<string, string[]> };
  objectRef?: { resource?: string; name?: string };
  stageTimestamp: string;
  responseStatus?: { code?: number };
}

export function readAudit(path: string): AuditEvent[] {
  const out: AuditEvent[] = [];
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (line) out.push(JSON.parse(line) as AuditEvent);
  }
  return out;
}

/** The token (credential id) a request used: tells apart processes of one ServiceAccount. */
export function credentialOf(e: AuditEvent): string {
  return e.user.extra?.["authentication.kubernetes.io/credential-id"]?.[0] ?? "?";
}

export interface LeaderResult {
  replicas: number;
  kills: number;
  /** Kill of the leader -> a new holder on the Lease, in ms. */
  handoverMs: number[];
  leaseDurationMs: number;
  /** Operator writes other than the Lease, from the audit log. */
  writes: number;
  /** Writers (tokens) that wrote at all, and contiguous runs of one writer over time. */
  writers: number;
  runs: number;
  /** Writes by a process inside another process's span of writes (0 = one leader at a time). */
  splitBrainWrites: number;
  report: ConvergenceReport;
}

type LeaseObj = KubeObject & { spec?: { holderIdentity?: string | null } };

export async function leaderScenario(opts: {
  replicas: number;
  kills: number;
  models: number;
  seed: number;
  log: Log;
}): Promise<LeaderResult> {
  const s = await stage("chaos-leader");
  try {
    const names = Array.from({ length: opts.replicas }, (_, i) => `replica-${String.fromCharCode(97 + i)}`);
    const procs = new Map<string, OperatorProcess>();
    for (const name of names) procs.set(name, await s.start({ name, leaderElect: true }));
    const holder = async () =>
      (
        await s.admin
          .get<LeaseObj>(builtinKinds.Lease, { namespace: defaultOperatorNamespace, name: leaseName })
          .catch(() => undefined)
      )?.spec?.holderIdentity ?? "";
    const churn = new Churn(s.admin, chaosNamespace, opts.seed);
    await drive(4, opts.models, () => churn.create().then(() => {}));
    let churning = true;
    const driver = drive(
      1,
      0,
      () => churn.step({ create: 0.05, update: 0.9 }).then(() => sleep(200)),
      () => !churning,
    );
    const handoverMs: number[] = [];
    for (let k = 0; k < opts.kills; k++) {
      let leader = "";
      const deadline = Date.now() + 180_000;
      while (!leader) {
        if (Date.now() > deadline)
          throw new Error("no replica took the Lease in 180 s (caches not syncing?)");
        leader = await holder();
        await sleep(100);
      }
      // Let the leader work a while, and the standbys finish their first sync: a standby
      // campaigns only once its caches are synced, so a cold one cannot take over at once.
      await sleep(2000);
      for (const p of procs.values()) await waitReady(p, 600_000);
      const name = leader.split("_")[0]!;
      const victim = procs.get(name);
      if (!victim) throw new Error(`lease holder ${leader} is none of ${names.join(", ")}`);
      const t0 = Date.now();
      await victim.kill("SIGKILL");
      procs.set(name, await s.start({ name, leaderElect: true }));
      let next = leader;
      while (next === leader || next === "") {
        if (Date.now() - t0 > 180_000) throw new Error(`no new leader 180 s after killing ${leader}`);
        await sleep(100);
        next = await holder();
      }
      handoverMs.push(Date.now() - t0);
      opts.log(`kill ${k + 1}: ${leader} -> ${next} in ${handoverMs.at(-1)} ms`);
    }
    churning = false;
    await driver;
    await churn.settle();
    const { report } = await waitConverged(s.admin, chaosNamespace, churn.wishes);
    const writes = readAudit(s.cluster.auditLog)
      .filter((e) => e.user.username === operatorUser && e.objectRef?.resource !== "leases")
      .filter((e) => (e.responseStatus?.code ?? 0) < 400)
      .sort((a, b) => a.stageTimestamp.localeCompare(b.stageTimestamp));
    return {
      replicas: opts.replicas,
      kills: opts.kills,
      handoverMs,
      leaseDurationMs: 15_000,
      ...writeRuns(writes),
      report,
    };
  } finally {
    await s.stop();
  }
}

/** Runs of one writer in time order; a writer that comes back after another wrote is split brain. */
export function writeRuns(writes: AuditEvent[]) {
  const span = new Map<string, { first: string; last: string }>();
  let runs = 0;
  let prev = "";
  for (const w of writes) {
    const c = credentialOf(w);
    if (c !== prev) runs++;
    prev = c;
    const s = span.get(c);
    if (s) s.last = w.stageTimestamp;
    else span.set(c, { first: w.stageTimestamp, last: w.stageTimestamp });
  }
  let splitBrainWrites = 0;
  for (const w of writes) {
    const c = credentialOf(w);
    for (const [other, s] of span) {
      if (other !== c && w.stageTimestamp > s.first && w.stageTimestamp < s.last) splitBrainWrites++;
    }
  }
  return { writes: writes.length, writers: span.size, runs, splitBrainWrites };
}

// -------------------------------------------------------- (4) conflicts and throttling (APF)

const flowSchemaKind: ResourceKind = {
  group: "flowcontrol.apiserver.k8s.io",
  version: "v1",
  kind: "FlowSchema",
  plural: "flowschemas",
  namespaced: false,
};
const priorityLevelKind: ResourceKind = {
  ...flowSchemaKind,
  kind: "PriorityLevelConfiguration",
  plural: "prioritylevelconfigurations",
};

/** API Priority and Fairness that gives the operator's ServiceAccount one seat and no queue. */
export async function throttleOperator(admin: KubeClient): Promise<void> {
  const opts = { fieldManager: "chaos-driver", force: true };
  await admin.apply(
    priorityLevelKind,
    {
      apiVersion: "flowcontrol.apiserver.k8s.io/v1",
      kind: "PriorityLevelConfiguration",
      metadata: { name: "chaos-operator-tiny" },
      spec: {
        type: "Limited",
        limited: {
          nominalConcurrencyShares: 1,
          lendablePercent: 0,
          limitResponse: { type: "Reject" },
        },
      },
    },
    opts,
  );
  await admin.apply(
    flowSchemaKind,
    {
      apiVersion: "flowcontrol.apiserver.k8s.io/v1",
      kind: "FlowSchema",
      metadata: { name: "chaos-operator-tiny" },
      spec: {
        priorityLevelConfiguration: { name: "chaos-operator-tiny" },
        matchingPrecedence: 100,
        distinguisherMethod: { type: "ByUser" },
        rules: [
          {
            subjects: [
              {
                kind: "ServiceAccount",
                serviceAccount: { name: "mlmodel-operator", namespace: defaultOperatorNamespace },
              },
            ],
            resourceRules: [
              { verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true },
            ],
            nonResourceRules: [{ verbs: ["*"], nonResourceURLs: ["*"] }],
          },
        ],
      },
    },
    opts,
  );
}

export interface ThrottleResult {
  models: number;
  writerUpdates: number;
  /** 409 Conflicts the concurrent writers got (and retried). */
  conflicts: number;
  /** 429s the operator got from the API server, and all its requests. */
  throttled: number;
  requests: number;
  reconciles: number;
  /** In a quiet window after convergence: operator writes (audit log) and reconciles. */
  idleWrites: number;
  idleReconciles: number;
  idleWindowMs: number;
  report: ConvergenceReport;
}

export async function throttleScenario(opts: {
  models: number;
  writers: number;
  updatesPerWriter: number;
  seed: number;
  log: Log;
}): Promise<ThrottleResult> {
  const s = await stage("chaos-throttle");
  try {
    await throttleOperator(s.admin);
    const op = await s.start({ concurrency: 8 });
    await waitReady(op, 300_000);
    const churn = new Churn(s.admin, chaosNamespace, opts.seed);
    for (let i = 0; i < opts.models; i++) await churn.create();
    const names = [...churn.wishes.keys()];
    let conflicts = 0;
    let writerUpdates = 0;
    // Writers race read-modify-write (PUT with the resourceVersion read) on a few models.
    await Promise.all(
      Array.from({ length: opts.writers }, async (_, w) => {
        const random = seededRandom(opts.seed * 31 + w);
        for (let i = 0; i < opts.updatesPerWriter; i++) {
          const name = names[Math.floor(random() * Math.min(names.length, 5))]!;
          for (;;) {
            const m = (await s.admin.get<MLModel>(mlModelKind, { namespace: chaosNamespace, name }))!;
            const spec = m.spec as unknown as { replicas: number; image: string };
            spec.replicas = 1 + Math.floor(random() * 2);
            spec.image = spec.image.replace(/v(\d+)$/, (_x, n) => `v${Number(n) + 1}`);
            try {
              await s.admin.replace(mlModelKind, m as unknown as KubeObject, { fieldManager: `writer-${w}` });
              writerUpdates++;
              break;
            } catch (err) {
              if ((err as { code?: number }).code !== 409) throw err;
              conflicts++;
            }
          }
        }
      }),
    );
    // The truth is what the API holds after the race.
    for (const name of names) churn.wishes.set(name, await wishFromCluster(s.admin, name));
    const { report } = await waitConverged(s.admin, chaosNamespace, churn.wishes, 600_000);
    // The cluster can look converged while a throttled operator still works off retries it
    // queued during the race; the quiet window starts once its queue has drained. A hot loop
    // never drains, and fails here.
    await waitOperatorSettled(op, 180_000);
    const before = await op.metrics();
    const auditBefore = operatorWrites(s.cluster.auditLog);
    const idleWindowMs = 20_000;
    await sleep(idleWindowMs);
    const after = await op.metrics();
    return {
      models: opts.models,
      writerUpdates,
      conflicts,
      throttled: metricSum(after, "rest_client_requests_total", 'code="429"'),
      requests: metricSum(after, "rest_client_requests_total"),
      reconciles: metricSum(after, "controller_runtime_reconcile_total"),
      idleWrites: operatorWrites(s.cluster.auditLog) - auditBefore,
      idleReconciles:
        metricSum(after, "controller_runtime_reconcile_total") -
        metricSum(before, "controller_runtime_reconcile_total"),
      idleWindowMs,
      report,
    };
  } finally {
    await s.stop();
  }
}

export async function wishFromCluster(admin: KubeClient, name: string): Promise<ModelWish> {
  const m = (await admin.get<MLModel>(mlModelKind, { namespace: chaosNamespace, name }))!;
  const spec = m.spec as unknown as { replicas: number; image: string };
  return { replicas: spec.replicas, version: Number(/v(\d+)$/.exec(spec.image)?.[1]) };
}

/** Waits until the operator's work queue is empty and no reconcile ran for 5 s in a row. */
async function waitOperatorSettled(
  op: { metrics(): Promise<Map<string, number>> },
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = -1;
  let quietSince = Date.now();
  for (;;) {
    const m = await op.metrics();
    const reconciles = metricSum(m, "controller_runtime_reconcile_total");
    if (reconciles !== last || metricSum(m, "workqueue_depth") > 0) {
      last = reconciles;
      quietSince = Date.now();
    } else if (Date.now() - quietSince >= 5_000) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `the operator did not settle within ${timeoutMs / 1000}s: still reconciling (a hot loop?)`,
      );
    }
    await sleep(1000);
  }
}

export function operatorWrites(auditLog: string): number {
  return readAudit(auditLog).filter(
    (e) =>
      e.user.username === operatorUser &&
      e.objectRef?.resource !== "leases" &&
      e.objectRef?.resource !== "events",
  ).length;
}

// ------------------------------------------------------------------------------ (6) soak

export interface SoakResult {
  durationMs: number;
  samples: { atMs: number; heapUsed: number; rss: number }[];
  /** Least-squares slope of heap used after the first tenth (warm-up), bytes per minute. */
  heapSlopePerMin: number;
  rssSlopePerMin: number;
  churn: Churn["stats"];
  operatorExited: boolean;
  report: ConvergenceReport;
}

export function slopePerMin(points: { atMs: number; value: number }[]): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((a, p) => a + p.atMs, 0) / n;
  const my = points.reduce((a, p) => a + p.value, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.atMs - mx) * (p.value - my);
    den += (p.atMs - mx) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 60_000;
}

export async function soakScenario(opts: {
  durationMs: number;
  models: number;
  sampleEveryMs: number;
  seed: number;
  log: Log;
}): Promise<SoakResult> {
  const s = await stage("chaos-soak");
  try {
    const op = await s.start();
    await waitReady(op);
    const churn = new Churn(s.admin, chaosNamespace, opts.seed);
    await drive(4, opts.models, () => churn.create().then(() => {}));
    const start = Date.now();
    const samples: SoakResult["samples"] = [];
    let churning = true;
    // Steady churn: about 4 changes a second, the population held near `models`.
    const driver = drive(
      1,
      0,
      () =>
        churn
          .step({ create: churn.wishes.size < opts.models ? 0.3 : 0.05, update: 0.85 })
          .then(() => sleep(250)),
      () => !churning,
    );
    while (Date.now() - start < opts.durationMs && op.alive) {
      await sleep(opts.sampleEveryMs);
      const m = await op.metrics().catch(() => new Map<string, number>());
      const sample = {
        atMs: Date.now() - start,
        heapUsed: metricSum(m, "nodejs_heap_size_used_bytes"),
        rss: op.rssBytes() ?? 0,
      };
      samples.push(sample);
      opts.log(
        `soak t=${Math.round(sample.atMs / 1000)}s heapUsed=${mib(sample.heapUsed)} rss=${mib(sample.rss)} models=${churn.wishes.size}`,
      );
    }
    churning = false;
    await driver;
    await churn.settle();
    const { report } = await waitConverged(s.admin, chaosNamespace, churn.wishes);
    const steady = samples.slice(Math.floor(samples.length / 10));
    return {
      durationMs: Date.now() - start,
      samples,
      heapSlopePerMin: slopePerMin(steady.map((x) => ({ atMs: x.atMs, value: x.heapUsed }))),
      rssSlopePerMin: slopePerMin(steady.map((x) => ({ atMs: x.atMs, value: x.rss }))),
      churn: churn.stats,
      operatorExited: !op.alive,
      report,
    };
  } finally {
    await s.stop();
  }
}

export const mib = (bytes: number) => `${(bytes / 1048576).toFixed(1)}MiB`;

export { checkConvergence };
