/**
 * kube-proxy paused on purpose: SIGSTOP for `pauseMs` out of every `periodMs`, so that a
 * live-traffic test shows a serving pod's drain holding while the node's rules lag behind the
 * EndpointSlices by seconds (what a kube-proxy starved of CPU or waiting for the xtables lock
 * does). Each pause ends with SIGCONT, and so do `stop` and this process's exit: a test that
 * dies mid-pause must not leave the node's kube-proxy frozen for the files after it.
 */
import type { ProcessRecord } from "../../src/cluster/process.ts";
import { isOurs } from "../../src/cluster/process.ts";

/** The pause schedule a live-traffic file applies: MLMODEL_TEST_PAUSE_KUBE_PROXY=PAUSE/PERIOD in seconds. */
export const pauseKubeProxyEnv = "MLMODEL_TEST_PAUSE_KUBE_PROXY";

export interface PauseSchedule {
  pauseMs: number;
  periodMs: number;
}

/** The schedule asked for in `env` (undefined when unset), e.g. "8/40": 8 s paused in every 40 s. */
export function pauseScheduleRequested(env: NodeJS.ProcessEnv = process.env): PauseSchedule | undefined {
  const raw = env[pauseKubeProxyEnv];
  if (raw === undefined || raw === "") return undefined;
  const match = /^(\d+(?:\.\d+)?)\/(\d+(?:\.\d+)?)$/.exec(raw);
  const [pause, period] = match ? [Number(match[1]), Number(match[2])] : [Number.NaN, Number.NaN];
  if (!(pause > 0 && period > pause)) {
    throw new Error(
      `${pauseKubeProxyEnv}=${JSON.stringify(raw)}: expected PAUSE/PERIOD in seconds with 0 < PAUSE < PERIOD, e.g. "8/40"`,
    );
  }
  return { pauseMs: pause * 1000, periodMs: period * 1000 };
}

export interface Pauser {
  /** How many pauses have begun. */
  readonly pauses: () => number;
  /** Ends the schedule, resuming the processes if they are paused. */
  stop(): Promise<void>;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

/** Pauses `records` on `schedule` until stopped or `maxMs` has passed; each pause comes at the end of its period. */
export function pauseOnSchedule(records: ProcessRecord[], schedule: PauseSchedule, maxMs: number): Pauser {
  const abort = new AbortController();
  const signalAll = async (signal: NodeJS.Signals) => {
    for (const record of records) if (await isOurs(record)) process.kill(record.pid, signal);
  };
  const resumeOnExit = () => {
    for (const record of records) {
      try {
        process.kill(record.pid, "SIGCONT");
      } catch {
        // Gone already.
      }
    }
  };
  process.on("exit", resumeOnExit);
  let pauses = 0;
  const end = Date.now() + maxMs;
  const loop = (async () => {
    while (!abort.signal.aborted && Date.now() < end) {
      await sleep(schedule.periodMs - schedule.pauseMs, abort.signal);
      if (abort.signal.aborted) break;
      pauses++;
      await signalAll("SIGSTOP");
      try {
        await sleep(schedule.pauseMs, abort.signal);
      } finally {
        await signalAll("SIGCONT");
      }
    }
  })();
  return {
    pauses: () => pauses,
    async stop() {
      abort.abort();
      await loop;
      process.off("exit", resumeOnExit);
    },
  };
}
