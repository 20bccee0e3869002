/** Prerequisites that are tools: the control plane's binaries, Helm, openssl. */
import { access, constants } from "node:fs/promises";
import { join } from "node:path";
import { binaryNames, ensureBinaries, inspectEntry, recipes } from "../../../src/cluster/binaries.ts";
import { binaryCacheDir } from "../../../src/cluster/paths.ts";
import type { CheckResult, Prerequisite } from "./engine.ts";
import { aptInstall, commandWorks, installOnce, isComplete, requireGo, run } from "./install.ts";

/**
 * The local control plane's binaries (etcd, kube-apiserver, kube-controller-manager,
 * kube-scheduler, kubectl, kwok). The runner starts one control plane for the tests that need it.
 */
export const cluster: Prerequisite = {
  name: "cluster",
  summary:
    "the local control plane's binaries, built from Go modules (cold: about 11 minutes on 2 cores; Kubernetes ~9, kwok ~1.5, etcd ~1)",
  async check(): Promise<CheckResult> {
    const userDir = process.env.MLMODEL_CONTROLPLANE_BIN_DIR;
    if (userDir) {
      for (const name of binaryNames) {
        try {
          await access(join(userDir, name), constants.X_OK);
        } catch {
          return {
            state: "missing",
            why: `MLMODEL_CONTROLPLANE_BIN_DIR=${userDir} lacks an executable ${name}`,
          };
        }
      }
      return { state: "ready" };
    }
    for (const recipe of recipes) {
      const dir = join(binaryCacheDir(), "controlplane", recipe.key);
      const entry = await inspectEntry(dir, recipe);
      if (entry.state === "missing") return { state: "missing", why: `${recipe.key} is not built yet` };
      if (entry.state === "corrupted") return { state: "missing", why: `${dir}: ${entry.why}` };
    }
    return { state: "ready" };
  },
  install: async (progress) => {
    await ensureBinaries(progress);
  },
  byHand: [
    "npm run prerequisites -- cluster   # builds with Go 1.26+ through the Go module proxy",
    `or set MLMODEL_CONTROLPLANE_BIN_DIR to a directory holding ${binaryNames.join(", ")}`,
  ].join("\n"),
};

/** Helm 3 for the chart tests (no release downloads here: built from its Go module). */
export const helmVersion = "v3.22.0";
const helmDir = () => join(binaryCacheDir(), "helm", helmVersion);

/** The helm binary: MLMODEL_HELM (one you already have), else the cached build. */
export function helmBinary(): string {
  return process.env.MLMODEL_HELM || join(helmDir(), "helm");
}

const helmBuild = [
  "install",
  "-trimpath",
  "-ldflags",
  `-s -w -X helm.sh/helm/v3/internal/version.version=${helmVersion}`,
  `helm.sh/helm/v3/cmd/helm@${helmVersion}`,
];

export const helm: Prerequisite = {
  name: "helm",
  summary: `Helm ${helmVersion} built from its Go module (cold: about 3 minutes on 2 cores)`,
  async check() {
    if (process.env.MLMODEL_HELM) {
      return commandWorks(process.env.MLMODEL_HELM, ["version"])
        ? { state: "ready" }
        : { state: "missing", why: `MLMODEL_HELM=${process.env.MLMODEL_HELM} does not run` };
    }
    return isComplete(helmDir()) ? { state: "ready" } : { state: "missing", why: "not built yet" };
  },
  install: () =>
    installOnce(helmDir(), async (dir) => {
      requireGo("helm");
      await run("go", helmBuild, {
        env: { CGO_ENABLED: "0", GOTOOLCHAIN: "local", GOFLAGS: "-buildvcs=false", GOBIN: dir },
      });
    }),
  byHand: [
    `GOBIN=${helmDir()} CGO_ENABLED=0 go ${helmBuild.map((a) => (a.includes(" ") ? `'${a}'` : a)).join(" ")}`,
    `touch ${helmDir()}/.mlmodel-complete`,
    "or set MLMODEL_HELM to a helm 3 you have",
  ].join("\n"),
};

/** openssl makes the tests' throwaway CAs and checks the control plane's certificates. */
export const openssl: Prerequisite = {
  name: "openssl",
  summary: "openssl from Debian (apt-get)",
  check: async () =>
    commandWorks("openssl", ["version"])
      ? { state: "ready" }
      : { state: "missing", why: "no openssl on PATH" },
  install: (progress) => aptInstall(["openssl"], progress),
  byHand: "apt-get install -y openssl   (or your distribution's openssl package)",
};

/** curl runs the commands the CLI prints for people to paste (mlmodel start --real-node's). */
export const curl: Prerequisite = {
  name: "curl",
  summary: "curl from Debian (apt-get)",
  check: async () =>
    commandWorks("curl", ["--version"]) ? { state: "ready" } : { state: "missing", why: "no curl on PATH" },
  install: (progress) => aptInstall(["curl"], progress),
  byHand: "apt-get install -y curl   (or your distribution's curl package)",
};
