/**
 * What a test run needs installed before it starts (a test server, a tool, the control plane's
 * binaries), as named prerequisites: each has a cheap `check` and an `install(progress)`.
 * `prepare` checks the ones a run needs, installs the missing ones (independent installs in
 * parallel, a prerequisite's `requires` first), and reports each as ready, installed, failed (with
 * how to install it by hand) or unavailable on this machine (its tests are then reported as
 * skipped, with the reason).
 *
 * Only `check` decides "unavailable" (not root, no kernel feature, ...): an install that fails is a
 * failure, never a skip, so a broken install can not pass as "not for this machine".
 */

export type ProgressFn = (line: string) => void;

export type CheckResult =
  | { state: "ready" }
  /** Not installed (yet): `why` says what is missing. */
  | { state: "missing"; why: string }
  /** Can not be had on this machine: its tests are skipped, with `reason`. */
  | { state: "unavailable"; reason: string };

export interface Prerequisite {
  /** The name test files declare, as in `// test-needs: moto`. */
  name: string;
  /** What it is and what a cold install costs, shown when it is installed. */
  summary: string;
  /** Prerequisites that must be ready before this one installs. */
  requires?: string[];
  /** Cheap: no build, no network. Runs before every test run. */
  check(): Promise<CheckResult>;
  /** Installs it (into a cache outside the repo), reporting progress lines; throws on failure. */
  install(progress: ProgressFn): Promise<void>;
  /** Commands that install it by hand, shown when `install` fails. */
  byHand: string;
}

export type Outcome =
  | { name: string; state: "ready" }
  | { name: string; state: "installed"; seconds: number }
  | { name: string; state: "unavailable"; reason: string }
  | { name: string; state: "failed"; error: string; byHand: string };

type Failed = Extract<Outcome, { state: "failed" }>;

export interface PrepareOptions {
  progress: ProgressFn;
  /** How often to say which installs are still running (default 30 s). */
  heartbeatMs?: number;
}

/** The named prerequisites and everything they require, in dependency order (requires first). */
export function withRequirements(registry: readonly Prerequisite[], names: Iterable<string>): Prerequisite[] {
  const byName = new Map(registry.map((p) => [p.name, p]));
  const ordered: Prerequisite[] = [];
  const visit = (name: string, path: string[]) => {
    const p = byName.get(name);
    if (!p) {
      const via = path.length > 0 ? ` (required by ${path.at(-1)})` : "";
      throw new Error(`unknown prerequisite "${name}"${via}; known: ${[...byName.keys()].sort().join(", ")}`);
    }
    if (path.includes(name))
      throw new Error(`prerequisites require each other: ${[...path, name].join(" -> ")}`);
    if (ordered.includes(p)) return;
    for (const r of p.requires ?? []) visit(r, [...path, name]);
    ordered.push(p);
  };
  for (const name of names) visit(name, []);
  return ordered;
}

function formatSeconds(seconds: number): string {
  const s = Math.round(seconds);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Checks every prerequisite in `wanted` (with what they require), installs the missing ones and
 * returns one outcome per prerequisite, in dependency order. Never throws for a prerequisite's
 * failure: that is an outcome the caller reports.
 */
export async function prepare(wanted: readonly Prerequisite[], opts: PrepareOptions): Promise<Outcome[]> {
  const { progress } = opts;
  const checks = new Map(
    await Promise.all(
      wanted.map(async (p): Promise<[string, CheckResult]> => {
        try {
          return [p.name, await p.check()];
        } catch (err) {
          return [p.name, { state: "missing", why: `its check failed: ${errorText(err)}` }];
        }
      }),
    ),
  );
  const byName = new Map(wanted.map((p) => [p.name, p]));
  const installing = new Map<string, number>();
  const outcomes = new Map<string, Promise<Outcome>>();

  const settle = (p: Prerequisite): Promise<Outcome> => {
    let outcome = outcomes.get(p.name);
    if (!outcome) {
      outcome = settleOnce(p);
      outcomes.set(p.name, outcome);
    }
    return outcome;
  };

  const settleOnce = async (p: Prerequisite): Promise<Outcome> => {
    const checked = checks.get(p.name)!;
    if (checked.state === "ready") return { name: p.name, state: "ready" };
    if (checked.state === "unavailable")
      return { name: p.name, state: "unavailable", reason: checked.reason };
    for (const r of p.requires ?? []) {
      const requirement = byName.get(r);
      if (!requirement)
        throw new Error(`${p.name} requires ${r}, which is not being prepared: use withRequirements`);
      const required = await settle(requirement);
      if (required.state === "unavailable")
        return {
          name: p.name,
          state: "unavailable",
          reason: `needs ${r}, which is unavailable: ${required.reason}`,
        };
      if (required.state === "failed")
        return {
          name: p.name,
          state: "failed",
          error: `not installed: it needs ${r}, which failed`,
          byHand: p.byHand,
        };
    }
    progress(`${p.name}: installing ${p.summary} (${checked.why})`);
    const started = Date.now();
    installing.set(p.name, started);
    try {
      await p.install((line) => progress(`${p.name}: ${line}`));
      const after = await p.check();
      if (after.state !== "ready") {
        const why = after.state === "missing" ? after.why : after.reason;
        throw new Error(`the install finished but its check still fails: ${why}`);
      }
      const seconds = (Date.now() - started) / 1000;
      progress(`${p.name}: ready (installed in ${formatSeconds(seconds)})`);
      return { name: p.name, state: "installed", seconds };
    } catch (err) {
      progress(`${p.name}: FAILED after ${formatSeconds((Date.now() - started) / 1000)}`);
      return { name: p.name, state: "failed", error: errorText(err), byHand: p.byHand };
    } finally {
      installing.delete(p.name);
    }
  };

  const heartbeat = setInterval(() => {
    if (installing.size === 0) return;
    const now = Date.now();
    const running = [...installing].map(
      ([name, since]) => `${name} (${formatSeconds((now - since) / 1000)})`,
    );
    progress(`still installing: ${running.join(", ")}`);
  }, opts.heartbeatMs ?? 30_000);
  try {
    return await Promise.all(wanted.map(settle));
  } finally {
    clearInterval(heartbeat);
  }
}

function describeOutcome(o: Outcome): string {
  if (o.state === "installed") return `${o.name} installed in ${formatSeconds(o.seconds)}`;
  if (o.state === "unavailable") return `${o.name} UNAVAILABLE (${o.reason})`;
  return `${o.name} ${o.state === "ready" ? "ready" : "FAILED"}`;
}

/** The prerequisites' states in one line, e.g. "moto ready, helm installed in 2m31s". */
export function describeOutcomes(outcomes: readonly Outcome[]): string {
  return outcomes.map(describeOutcome).join(", ");
}

/** What to print for a failed install: what failed, why, and how to do it by hand. */
export function failureReport(failed: Failed): string {
  const indent = (text: string) =>
    text
      .trimEnd()
      .split("\n")
      .map((l) => `#     ${l}`)
      .join("\n");
  return [
    `# FAILED to install prerequisite "${failed.name}":`,
    indent(failed.error),
    "#   to install it by hand:",
    indent(failed.byHand),
  ].join("\n");
}

/**
 * `prepare` for a command line: progress and the outcomes on stdout, after `prefix`, and what
 * failed and how to install it by hand on stderr. Returns the outcomes and the number that failed.
 */
export async function prepareAndReport(
  wanted: readonly Prerequisite[],
  prefix: string,
): Promise<{ outcomes: Outcome[]; failed: number }> {
  const outcomes = await prepare(wanted, { progress: (line) => console.log(`${prefix}${line}`) });
  console.log(`${prefix}${describeOutcomes(outcomes)}`);
  const failed = outcomes.filter((o): o is Failed => o.state === "failed");
  for (const f of failed) console.error(failureReport(f));
  return { outcomes, failed: failed.length };
}

/** The files that need an unavailable prerequisite, each with the reason, to report as skipped. */
export function unavailableFiles(
  needs: ReadonlyMap<string, readonly string[]>,
  outcomes: readonly Outcome[],
): { file: string; reason: string }[] {
  const unavailable = new Map(
    outcomes.flatMap((o) => (o.state === "unavailable" ? [[o.name, o.reason]] : [])),
  );
  return [...needs].flatMap(([file, names]) => {
    const missing = names.filter((n) => unavailable.has(n));
    if (missing.length === 0) return [];
    const reason = missing
      .map((n) => `needs ${n}, unavailable on this machine: ${unavailable.get(n)}`)
      .join("; ");
    return [{ file, reason }];
  });
}

/** Where a run says which prerequisites must be available (CI: the machine can host them all). */
export const requiredEnv = "MLMODEL_TEST_REQUIRE";

/** The names in MLMODEL_TEST_REQUIRE (commas or spaces between them). */
export function requiredNames(env: NodeJS.ProcessEnv = process.env): Set<string> {
  return new Set((env[requiredEnv] ?? "").split(/[\s,]+/).filter(Boolean));
}

/**
 * Unavailable files split by whether their missing prerequisite was required: a required one
 * that is unavailable makes its files failures ("not run"), never skips, so a CI machine that
 * lost the ability to host a real node cannot pass with the real-node proof skipped.
 */
export function splitUnavailable(
  files: readonly { file: string; reason: string }[],
  needs: ReadonlyMap<string, readonly string[]>,
  outcomes: readonly Outcome[],
  required: ReadonlySet<string>,
  registry: readonly Prerequisite[],
): { skipped: { file: string; reason: string }[]; notRun: { file: string; reason: string }[] } {
  const unavailable = new Set(outcomes.filter((o) => o.state === "unavailable").map((o) => o.name));
  // Unavailable because something required is (own-real-node needs real-node): required too.
  const dependsOnRequired = (name: string): boolean =>
    required.has(name) ||
    (registry.find((p) => p.name === name)?.requires ?? []).some(
      (r) => unavailable.has(r) && dependsOnRequired(r),
    );
  const requiredUnavailable = new Set([...unavailable].filter(dependsOnRequired));
  const isRequired = (file: string) => (needs.get(file) ?? []).some((n) => requiredUnavailable.has(n));
  return {
    skipped: files.filter((f) => !isRequired(f.file)),
    notRun: files
      .filter((f) => isRequired(f.file))
      .map((f) => ({ file: f.file, reason: `${f.reason} (required by ${requiredEnv})` })),
  };
}
