/**
 * The pure part of the first-inference series across storage modes (first-inference.ts runs
 * it): which cases run in which order, how a case's milestones split into figures, when one
 * more run still fits the lock-time budget, and the table of medians.
 */
import { median } from "../lib/stats.ts";

/** The storage modes the series compares: the single claim (before) and the node cache (after). */
export const benchStorageModes = ["Claim", "NodeCache"] as const;
export type BenchStorageMode = (typeof benchStorageModes)[number];

/** cold: the version was never fetched on any node; warm: the same URI and sha256 were served just before. */
export type CacheTemperature = "cold" | "warm";

export interface FirstInferenceCase {
  run: number;
  replicas: number;
  storage: BenchStorageMode;
  cache: CacheTemperature;
}

/** `--storage Claim,NodeCache` as a list, or an error that names the flag, the value and what is known. */
export function parseStorageModes(value: string): BenchStorageMode[] {
  const modes = value.split(",").filter(Boolean);
  if (modes.length === 0)
    throw new Error(`--storage "${value}" names no mode; give ${benchStorageModes.join(", ")} or both`);
  for (const mode of modes)
    if (!benchStorageModes.includes(mode as BenchStorageMode))
      throw new Error(
        `--storage "${value}": "${mode}" is not a storage mode; give ${benchStorageModes.join(", ")} or both, comma-separated`,
      );
  if (new Set(modes).size !== modes.length) throw new Error(`--storage "${value}" names a mode twice`);
  return modes as BenchStorageMode[];
}

/**
 * Every case in order: per run, per replica count, the storage modes in an order that
 * alternates from one group to the next (so neither mode always runs first, on a machine whose
 * load drifts), each mode cold then warm (warm needs the cold case's version).
 */
export function casePlan(
  runs: number,
  replicas: readonly number[],
  storage: readonly BenchStorageMode[],
): FirstInferenceCase[] {
  const cases: FirstInferenceCase[] = [];
  let group = 0;
  for (let run = 1; run <= runs; run++)
    for (const r of replicas) {
      const order = group++ % 2 === 0 ? storage : [...storage].reverse();
      for (const mode of order)
        for (const cache of ["cold", "warm"] as const) cases.push({ run, replicas: r, storage: mode, cache });
    }
  return cases;
}

/**
 * Whether one more run fits the budget of lock time: it starts only when the time used so far
 * plus the longest run so far stays within it (the first run always starts).
 */
export function nextRunFits(usedMs: number, runDurationsMs: readonly number[], budgetMs: number): boolean {
  if (runDurationsMs.length === 0) return true;
  return usedMs + Math.max(...runDurationsMs) <= budgetMs;
}

/** First observations in ms after apply (a 100 ms poll); each key absent until seen. */
export interface Milestones {
  /** The download Job succeeded. */
  downloaded?: number;
  /** The first serving container running. */
  running?: number;
  /** The first serving pod Ready. */
  ready?: number;
  /** Every desired replica Ready. */
  allReady?: number;
  /** The first correct prediction through the model's Service. */
  answered?: number;
  /** The MLModel's status said Ready. */
  statusReady?: number;
}

export interface FirstInferenceSplit {
  /** apply -> the download Job complete */
  downloadS: number;
  /** Job complete -> the first serving container running (with the node cache: its copy into the pod first) */
  podStartS: number;
  /** container running -> the first pod Ready (the server loads the model) */
  modelLoadS: number;
  /** first pod Ready -> the first correct prediction through the Service */
  readinessS: number;
  /** apply -> the first correct prediction */
  totalS: number;
  /** apply -> every replica Ready */
  allReadyS: number;
  /** apply -> the status said Ready */
  statusReadyS: number;
}

const milestoneNames: (keyof Milestones)[] = [
  "downloaded",
  "running",
  "ready",
  "allReady",
  "answered",
  "statusReady",
];

const seconds = (ms: number) => Math.round(ms / 100) / 10;

/** The milestones as the series' split; an error names the milestones never seen. */
export function splitMilestones(seen: Milestones): FirstInferenceSplit {
  const missing = milestoneNames.filter((m) => seen[m] === undefined);
  if (missing.length)
    throw new Error(`milestones never seen: ${missing.join(", ")} (seen ${JSON.stringify(seen)})`);
  const m = seen as Required<Milestones>;
  return {
    downloadS: seconds(m.downloaded),
    podStartS: seconds(m.running - m.downloaded),
    modelLoadS: seconds(m.ready - m.running),
    readinessS: seconds(m.answered - m.ready),
    totalS: seconds(m.answered),
    allReadyS: seconds(m.allReady),
    statusReadyS: seconds(m.statusReady),
  };
}

export interface CaseResult extends FirstInferenceCase, FirstInferenceSplit {
  /** The mode the status reported (status.storageMode), to show the case got the mode it asked for. */
  storageModeReported?: string;
  /** Bytes the origin sent for this case's model. */
  originBytes: number;
  /** Distinct nodes of the Ready serving pods when every replica was first Ready. */
  podNodes: number;
  /** Answers of 200 with other predictions than scikit-learn's, before the first correct one. */
  wrongAnswers: number;
  /** 1-minute load average at the case's start and end. */
  loadStart: number;
  loadEnd: number;
  /** When the case started (UTC). */
  startedAt: string;
}

const figureColumns: (keyof FirstInferenceSplit)[] = [
  "totalS",
  "downloadS",
  "podStartS",
  "modelLoadS",
  "readinessS",
  "allReadyS",
];

/**
 * A table of medians per storage mode, replica count and cache temperature, in that order,
 * with the values of each run beside the total, the origin bytes and the nodes the pods ran on.
 */
export function caseTable(results: readonly CaseResult[]): string[] {
  const groups = new Map<string, CaseResult[]>();
  const sorted = [...results].sort(
    (a, b) =>
      benchStorageModes.indexOf(a.storage) - benchStorageModes.indexOf(b.storage) ||
      a.replicas - b.replicas ||
      (a.cache === b.cache ? 0 : a.cache === "cold" ? -1 : 1),
  );
  for (const r of sorted) {
    const key = `${r.storage} | ${r.replicas} | ${r.cache}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  const rows = [...groups].map(([key, rs]) => {
    const med = (k: keyof FirstInferenceSplit) => median(rs.map((r) => r[k]));
    const each = rs.map((r) => r.totalS).join(", ");
    const bytes = [...new Set(rs.map((r) => r.originBytes))].join("/");
    const nodes = [...new Set(rs.map((r) => r.podNodes))].join("/");
    return `${key} | ${med("totalS")} (${each}) | ${figureColumns
      .slice(1)
      .map((k) => med(k))
      .join(" | ")} | ${bytes} | ${nodes}`;
  });
  return [
    "storage | replicas | cache | total s median (runs) | download | pod start | model load | readiness | all Ready | origin bytes | pod nodes",
    ...rows,
  ];
}
