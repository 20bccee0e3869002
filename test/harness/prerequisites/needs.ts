/**
 * Which test files need which prerequisites.
 *
 * - A whole directory that needs something says so here, once: every integration and e2e test
 *   (and the examples' tests) runs against the local control plane, so it needs "cluster".
 * - A single file that needs something says so itself, in a line of its own:
 *
 *       // test-needs: moto, openssl
 *
 *   The declaration travels with the file (moved, copied, deleted), and `npm test -- --only FILE`
 *   installs exactly what FILE needs. A line that starts `// test-needs:` must name known
 *   prerequisites, or the run stops saying so: a typo is never silently ignored.
 *
 * The harness helpers that use a prerequisite (serverBinary, makeCertificates, helm) call
 * `requireDeclared`, so a test file that forgets its line fails on every machine, not only on a
 * fresh one where the thing is missing.
 */
import { readFileSync } from "node:fs";
import { relative, resolve, sep } from "node:path";

export const repoRoot = resolve(import.meta.dirname, "..", "..", "..");

export const directoryNeeds: readonly { under: string; needs: readonly string[] }[] = [
  { under: "test/integration/", needs: ["cluster"] },
  { under: "test/e2e/", needs: ["cluster"] },
  { under: "examples/", needs: ["cluster"] },
];

const declarationLine = /^\/\/ test-needs:(.*)$/gm;
const prerequisiteName = /^[a-z][a-z0-9-]*$/;

/** The names declared by `// test-needs:` lines in a file's source. Throws on a malformed line. */
export function declaredNeeds(source: string, file: string): string[] {
  const names: string[] = [];
  for (const match of source.matchAll(declarationLine)) {
    const list = match[1]!.split(",").map((n) => n.trim());
    const bad = list.filter((n) => !prerequisiteName.test(n));
    if (bad.length > 0 || list.length === 0) {
      throw new Error(
        `${file}: "${match[0]}" must list prerequisite names separated by commas, e.g. "// test-needs: moto, openssl"`,
      );
    }
    names.push(...list);
  }
  return names;
}

/** Everything a test file needs: its directory's needs and its own declaration. */
export function needsOf(file: string, source: string): string[] {
  const path = file.split(sep).join("/");
  const fromDirectory = directoryNeeds.filter((d) => path.startsWith(d.under)).flatMap((d) => d.needs);
  return [...new Set([...fromDirectory, ...declaredNeeds(source, file)])];
}

/**
 * The needs of each file (paths relative to the repo), checked against the known names: an
 * unknown name stops the run naming the file, the name and the known ones.
 */
export function planNeeds(
  files: readonly { file: string; source: string }[],
  known: ReadonlySet<string>,
): Map<string, string[]> {
  const plan = new Map<string, string[]>();
  for (const { file, source } of files) {
    const needs = needsOf(file, source);
    const unknown = needs.filter((n) => !known.has(n));
    if (unknown.length > 0) {
      throw new Error(
        `${file} declares unknown prerequisite ${unknown.map((n) => `"${n}"`).join(", ")}; known: ${[...known].sort().join(", ")}`,
      );
    }
    plan.set(file, needs);
  }
  return plan;
}

/** Set by scripts/test.ts for the test processes it starts. */
export const runnerMarker = "MLMODEL_TEST_RUNNER";

/**
 * Fails when the running test file (under scripts/test.ts) uses `name` without declaring it, so
 * a missing `// test-needs:` line shows on a warm machine too. Outside the runner (a bench, a
 * direct `node --test`), it does nothing.
 */
export function requireDeclared(
  name: string,
  env: NodeJS.ProcessEnv = process.env,
  entry = process.argv[1],
): void {
  if (env[runnerMarker] !== "1" || !entry) return;
  const file = relative(repoRoot, entry);
  if (!needsOf(file, readFileSync(entry, "utf8")).includes(name)) {
    throw new Error(
      `${file} uses ${name} but does not declare it: add the line "// test-needs: ${name}" at its top, so that npm test installs ${name} on a fresh machine`,
    );
  }
}
