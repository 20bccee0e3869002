/**
 * Temporary directories for tests, removed when the test file's process exits (pass or fail;
 * node --test runs each file in its own process). Without this, every run left its scratch
 * directories in /tmp: hundreds after a day of test runs.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const made: string[] = [];
process.once("exit", () => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A fresh directory `$TMPDIR/mlmodel-<prefix>-XXXXXX`, gone when this process exits. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `mlmodel-${prefix}-`));
  made.push(dir);
  return dir;
}
