/**
 * The Helm CLI for the chart tests. No release binaries can be downloaded here, so it is built
 * from its Go module through the Go module proxy (`go install helm.sh/helm/v3/cmd/helm@VERSION`,
 * ~3 minutes cold on 2 cores) and cached beside the control plane's binaries, outside the repo.
 * MLMODEL_HELM=/path/to/helm uses a helm you already have.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { binaryCacheDir } from "../../../src/cluster/paths.ts";
import { repoRoot } from "./support.ts";

export const helmVersion = "v3.22.0";
/** The Kubernetes version `helm template` assumes (a `go install` build defaults to v1.20). */
export const kubeVersion = "1.36.3";

export function ensureHelm(): string {
  if (process.env.MLMODEL_HELM) return process.env.MLMODEL_HELM;
  const dir = join(binaryCacheDir(), `helm-${helmVersion}`);
  const bin = join(dir, "helm");
  if (existsSync(bin)) return bin;
  // Build into a staging directory and rename: an interrupted build leaves no half binary.
  const staging = `${dir}.building-${process.pid}`;
  mkdirSync(staging, { recursive: true });
  const r = spawnSync(
    "go",
    [
      "install",
      "-trimpath",
      "-ldflags",
      `-s -w -X helm.sh/helm/v3/internal/version.version=${helmVersion}`,
      `helm.sh/helm/v3/cmd/helm@${helmVersion}`,
    ],
    {
      encoding: "utf8",
      env: {
        ...process.env,
        CGO_ENABLED: "0",
        GOTOOLCHAIN: "local",
        GOFLAGS: "-buildvcs=false",
        GOBIN: staging,
      },
    },
  );
  if (r.status !== 0) {
    rmSync(staging, { recursive: true, force: true });
    throw new Error(`building helm ${helmVersion} with go install failed:\n${r.stderr}`);
  }
  mkdirSync(dir, { recursive: true });
  renameSync(join(staging, "helm"), bin);
  rmSync(staging, { recursive: true, force: true });
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
