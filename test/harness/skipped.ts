/**
 * Run by scripts/test.ts beside the test files when some files need a prerequisite that is
 * unavailable on this machine: one skipped test per such file, named by the file and carrying the
 * reason, so node's own summary counts them as skipped and the spec reporter shows why. A file
 * that could not run is never silently dropped from the run.
 */
import { test } from "node:test";
import { type SkippedFile, skippedFilesEnv } from "./run-summary.ts";

const skipped = JSON.parse(process.env[skippedFilesEnv] ?? "[]") as SkippedFile[];
for (const { file, reason } of skipped) test(file, { skip: reason }, () => {});
