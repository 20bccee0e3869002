/**
 * CPU burners: busy processes that saturate the machine's cores while a test runs, so that a
 * live-traffic test shows what a fully loaded node does to a rollout (a slow kubelet, a late
 * kube-proxy sync). Each burner ends on its own after `maxMs`, so a test process that dies
 * cannot leave one spinning; `stop` ends them sooner.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";

/** How many burners a live-traffic file starts: MLMODEL_TEST_BURN_CORES, default none. */
export const burnCoresEnv = "MLMODEL_TEST_BURN_CORES";

export interface Burners {
  readonly count: number;
  /** Each burner's exit: its code (0 when it ended by itself) or the signal that ended it. */
  readonly exits: Promise<(number | NodeJS.Signals | null)[]>;
  /** Ends every burner and waits for them to exit. */
  stop(): Promise<void>;
}

/** The burner count asked for in `env` (0 when unset). */
export function burnersRequested(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env[burnCoresEnv];
  if (raw === undefined || raw === "") return 0;
  const count = Number(raw);
  if (!Number.isInteger(count) || count < 0 || count > 64) {
    throw new Error(
      `${burnCoresEnv}=${JSON.stringify(raw)}: expected a whole number of burners from 0 to 64`,
    );
  }
  return count;
}

/** Starts `count` single-threaded busy loops that each stop by themselves after `maxMs`. */
export function burnCores(count: number, maxMs: number): Burners {
  if (!Number.isInteger(maxMs) || maxMs <= 0) {
    throw new Error(`burnCores maxMs=${maxMs}: expected a positive whole number of milliseconds`);
  }
  const loop = `const end = Date.now() + ${maxMs}; while (Date.now() < end) {}`;
  const children: ChildProcess[] = Array.from({ length: count }, () =>
    spawn(process.execPath, ["-e", loop], { stdio: "ignore" }),
  );
  const exits = Promise.all(
    children.map(async (child) => {
      if (child.exitCode === null && child.signalCode === null) await once(child, "exit");
      return child.exitCode ?? child.signalCode;
    }),
  );
  return {
    count,
    exits,
    async stop() {
      await Promise.all(
        children.map(async (child) => {
          if (child.exitCode !== null || child.signalCode !== null) return;
          const exited = once(child, "exit");
          child.kill("SIGKILL");
          await exited;
        }),
      );
    },
  };
}
