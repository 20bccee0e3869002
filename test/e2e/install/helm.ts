/**
 * The Helm CLI for the chart tests: the prerequisite "helm" (test/harness/prerequisites/tools.ts)
 * builds it from its Go module and caches it outside the repo; `npm test` installs it for the
 * files that declare `// test-needs: helm`. MLMODEL_HELM=/path/to/helm uses a helm you already have.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { requireDeclared } from "../../harness/prerequisites/needs.ts";
import { helmBinary } from "../../harness/prerequisites/tools.ts";
import { repoRoot } from "./support.ts";

/** The Kubernetes version `helm template` assumes (a `go install` build defaults to v1.20). */
export const kubeVersion = "1.36.3";

export function ensureHelm(): string {
  requireDeclared("helm");
  const bin = helmBinary();
  if (!existsSync(bin)) {
    throw new Error(
      `${bin} is missing: run the test through npm test (it installs helm), or: npm run prerequisites -- helm`,
    );
  }
  return bin;
}

export interface HelmResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function helm(args: string[]): HelmResult {
  const r = spawnSync(ensureHelm(), args, { cwd: repoRoot, encoding: "utf8" });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}
