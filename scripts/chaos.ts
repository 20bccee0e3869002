/**
 * `npm run test:chaos`: the long reliability suite, each scenario on a private control plane.
 * Prints figures as it goes and a summary at the end; exits non-zero when an invariant breaks
 * (something missed, orphaned, duplicated, a crash, split-brain writes, a rejection that does
 * not name its field). Times are printed, never judged: this is a shared, noisy 2-core machine.
 *
 *   npm run test:chaos                          every scenario, long sizes (M=500 kill run)
 *   npm run test:chaos -- --only kill,leader    some scenarios: kill, outage, leader, throttle, fuzz, canary, soak
 *   npm run test:chaos -- --soak 30m            also the soak (or only it: --only soak --soak 30m)
 *   npm run test:chaos -- --models 200 --kills 10 --seed 7
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { canaryKillScenario } from "../test/chaos/canary.ts";
import { type ConvergenceReport, converged } from "../test/chaos/churn.ts";
import { fuzzScenario } from "../test/chaos/fuzz.ts";
import {
  killScenario,
  leaderScenario,
  mib,
  outageScenario,
  soakScenario,
  throttleScenario,
} from "../test/chaos/scenarios.ts";

const { values } = parseArgs({
  options: {
    only: { type: "string" },
    soak: { type: "string" },
    models: { type: "string", default: "500" },
    kills: { type: "string", default: "20" },
    seed: { type: "string", default: "1" },
    json: { type: "string" },
  },
});

function duration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text);
  if (!m) throw new Error(`--soak "${text}" is not a duration like 30m, 90s or 1h`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? "m"]!;
  return Number(m[1]) * unit;
}

const all = ["kill", "outage", "leader", "throttle", "fuzz", "canary", ...(values.soak ? ["soak"] : [])];
const selected = values.only ? values.only.split(",") : all;
const models = Number(values.models);
const seed = Number(values.seed);
const started = Date.now();
const log = (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(0)}s] ${line}`);
const failures: string[] = [];
const results: Record<string, unknown> = {};

function check(scenario: string, ok: boolean, what: string): void {
  if (!ok) failures.push(`${scenario}: ${what}`);
  log(`${scenario}: ${ok ? "ok  " : "FAIL"} ${what}`);
}

function checkConverged(scenario: string, r: ConvergenceReport): void {
  const { problems, ...counts } = r;
  check(scenario, converged(r), `converged: ${JSON.stringify(counts)}`);
  for (const p of problems.slice(0, 10)) log(`  ${p}`);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

if (selected.includes("kill")) {
  log(`kill: ${models} models, ${values.kills} SIGKILLs`);
  const r = await killScenario({ models, kills: Number(values.kills), seed, log });
  results.kill = r;
  check(
    "kill",
    r.killsSurvived === r.kills && r.crashes === 0,
    `kills survived ${r.killsSurvived}/${r.kills}, crashes ${r.crashes}`,
  );
  log(`kill: churn ${JSON.stringify(r.churn)}; converged ${r.convergeMs} ms after the last change`);
  checkConverged("kill", r.report);
}

if (selected.includes("outage")) {
  const r = await outageScenario({ models: Math.min(models, 100), seed: seed + 1, log });
  results.outage = r;
  check("outage", !r.operatorExited, "the operator process stayed up through both API server restarts");
  check("outage", r.gone410 > 0, `410 Gone relists: ${r.gone410} (watch errors ${r.watchErrors})`);
  log(
    `outage: ${r.refused} refused connections, longest wait chosen before retrying one ${r.refusedMaxRetryMs} ms`,
  );
  log(`outage: short restarts: /readyz ${JSON.stringify(r.readyz)}, /healthz ${JSON.stringify(r.healthz)}`);
  const x = r.readiness;
  const sec = (ms: number | undefined) => (ms === undefined ? "never" : `${(ms / 1000).toFixed(1)} s`);
  log(
    `outage: (ready when stopped: ${x.readyBefore}) API server down ${sec(x.apiDownMs)}: /readyz ${JSON.stringify(x.readyz)}, /healthz ${JSON.stringify(x.healthz)} (until ready again ${JSON.stringify(x.healthzUntilReady)}); not ready ${sec(x.notReadyAfterMs)} after the API went down, for ${sec(x.notReadyForMs)}; ready again ${sec(x.readyAgainAfterMs)} after the API server's port accepted again (its health check passed ${sec(x.apiHealthyAfterMs)} after that)`,
  );
  log(`outage: /readyz said: ${x.reason?.replaceAll("\n", " | ") ?? "(never failed)"}`);
  check("outage", (x.readyz["500"] ?? 0) > 0, "/readyz failed while the API server was down");
  check("outage", x.readyAgainAfterMs !== undefined, "/readyz 200 again after the API server came back");
  check(
    "outage",
    Object.keys(x.healthzUntilReady).every((c) => c === "200" || c === "0"),
    "/healthz never failed (0 = unanswered within 2 s)",
  );
  checkConverged("outage", r.report);
}

if (selected.includes("leader")) {
  const r = await leaderScenario({ replicas: 3, kills: 8, models: 30, seed: seed + 2, log });
  results.leader = r;
  const bound = r.leaseDurationMs + 2000;
  log(
    `leader: handover median ${median(r.handoverMs)} ms, max ${Math.max(...r.handoverMs)} ms (lease ${r.leaseDurationMs} ms + retry 2000 ms = ${bound} ms; ${r.handoverMs.filter((h) => h > bound).length} over, polled every 100 ms on a noisy machine)`,
  );
  check(
    "leader",
    r.splitBrainWrites === 0 && r.runs === r.writers,
    `one writer at a time: ${r.writes} writes by ${r.writers} leaders in ${r.runs} runs, ${r.splitBrainWrites} split-brain`,
  );
  checkConverged("leader", r.report);
}

if (selected.includes("throttle")) {
  const r = await throttleScenario({ models: 40, writers: 6, updatesPerWriter: 40, seed: seed + 3, log });
  results.throttle = r;
  log(
    `throttle: ${r.conflicts} writer 409s over ${r.writerUpdates} updates; operator 429s ${r.throttled} of ${r.requests} requests; ${r.reconciles} reconciles`,
  );
  check("throttle", r.conflicts > 0 && r.throttled > 0, "conflicts and throttling really happened");
  check(
    "throttle",
    r.idleWrites === 0,
    `writes in a ${r.idleWindowMs} ms quiet window: ${r.idleWrites}; reconciles ${r.idleReconciles}`,
  );
  checkConverged("throttle", r.report);
}

if (selected.includes("fuzz")) {
  const r = await fuzzScenario({ random: 300, seed: seed + 4, log });
  results.fuzz = r;
  log(`fuzz: ${r.cases} cases`);
  for (const [cls, row] of Object.entries(r.byClass)) log(`  ${cls}: ${JSON.stringify(row)}`);
  log(
    `fuzz: operator RSS first ${mib(r.rss.first)}, max ${mib(r.rss.max)}, last ${mib(r.rss.last)}, slope ${mib(r.rss.slopePerMin)}/min over ${r.rss.samples} samples`,
  );
  check("fuzz", !r.operatorExited, "the operator never exited");
  check(
    "fuzz",
    r.rejectedWithoutField.length === 0,
    `rejections that name no field: ${r.rejectedWithoutField.length}`,
  );
  for (const x of r.rejectedWithoutField.slice(0, 5)) log(`  ${x}`);
  check("fuzz", r.unclear.length === 0, `accepted without a clear status: ${r.unclear.length}`);
  for (const x of r.unclear.slice(0, 10)) log(`  ${x}`);
  check(
    "fuzz",
    r.idleWrites === 0,
    `writes in the quiet window: ${r.idleWrites}; reconciles ${r.idleReconciles}`,
  );
}

if (selected.includes("canary")) {
  // Canaries are heavier than churned models (two Deployments, steps, a promotion): 1 in 25.
  const canaries = Math.max(4, Math.round(models / 25));
  log(`canary: ${canaries} canaries, SIGKILL after transitions and commands`);
  const r = await canaryKillScenario({ models: canaries, kills: Number(values.kills), seed, log });
  results.canary = r;
  check(
    "canary",
    r.crashes === 0,
    `crashes ${r.crashes}, kills ${r.kills} (${r.killsAfterTransition} after transitions, ${r.killsAfterCommand} after commands)`,
  );
  check(
    "canary",
    r.promoted === canaries && r.lostPromotions === 0,
    `promoted ${r.promoted}/${canaries}, lost promotions ${r.lostPromotions}`,
  );
  check(
    "canary",
    r.secondCanaries === 0 && r.doubleSteps === 0,
    `second canaries ${r.secondCanaries}, double steps ${r.doubleSteps}`,
  );
  check("canary", r.orphans.length === 0, `orphans: ${r.orphans.slice(0, 5).join(", ") || "none"}`);
  for (const p of r.problems.slice(0, 10)) log(`  ${p}`);
}

if (selected.includes("soak")) {
  const durationMs = duration(values.soak ?? "30m");
  const r = await soakScenario({ durationMs, models: 100, sampleEveryMs: 10_000, seed: seed + 5, log });
  results.soak = { ...r, samples: r.samples.length };
  log(
    `soak: ${(r.durationMs / 60_000).toFixed(1)} min, churn ${JSON.stringify(r.churn)}; heap slope ${mib(r.heapSlopePerMin)}/min, RSS slope ${mib(r.rssSlopePerMin)}/min (${r.samples.length} samples)`,
  );
  check("soak", !r.operatorExited, "the operator stayed up");
  checkConverged("soak", r.report);
}

if (values.json) writeFileSync(values.json, `${JSON.stringify(results, null, 2)}\n`);
log(`${selected.join(", ")}: ${failures.length === 0 ? "all invariants held" : `${failures.length} failed`}`);
for (const f of failures) log(`FAILED ${f}`);
console.log(
  `${selected.length - new Set(failures.map((f) => f.split(":")[0])).size} passed, ${new Set(failures.map((f) => f.split(":")[0])).size} failed`,
);
process.exit(failures.length === 0 ? 0 : 1);
