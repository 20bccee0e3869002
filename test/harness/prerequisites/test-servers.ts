/**
 * The real storage servers the downloader's integration tests start on loopback, installed into
 * a cache outside the repo (testServersDir(), keyed by version, so a second run costs nothing):
 *   - moto (PyPI moto[server]) in a Python venv: an S3-compatible server
 *   - Azurite (npm): the Azure Blob Storage emulator
 *   - fake-gcs-server (Go module): a Google Cloud Storage JSON API server
 * The HTTPS and Hugging Face layout servers are plain Node servers inside the tests.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type { CheckResult, Prerequisite } from "./engine.ts";
import { aptInstall, installOnce, isComplete, requireGo, run, testServersDir } from "./install.ts";

export const motoVersion = "5.2.5";
export const azuriteVersion = "3.37.0";
export const fakeGcsVersion = "v1.56.1";

// One directory per server and version, e.g. moto/5.2.5. (The old layout, moto-5.2.5 written by
// scripts/install-test-servers.sh, had no completion marker; it is left alone, never trusted.)
const motoDir = () => join(testServersDir(), "moto", motoVersion);
const azuriteDir = () => join(testServersDir(), "azurite", azuriteVersion);
const fakeGcsDir = () => join(testServersDir(), "fake-gcs-server", fakeGcsVersion);

/** Where each server's entry point is once installed. */
export const serverPaths = {
  moto: () => join(motoDir(), "bin", "moto_server"),
  azurite: () => join(azuriteDir(), "node_modules", "azurite", "dist", "src", "blob", "main.js"),
  "fake-gcs": () => join(fakeGcsDir(), "fake-gcs-server"),
};

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
}

function installedIn(dir: string): CheckResult {
  return isComplete(dir) ? { state: "ready" } : { state: "missing", why: `nothing installed in ${dir} yet` };
}

export const moto: Prerequisite = {
  name: "moto",
  summary: `moto[server] ${motoVersion} from PyPI into a Python venv (about a minute)`,
  check: async () => installedIn(motoDir()),
  install: (progress) =>
    installOnce(motoDir(), async (dir) => {
      try {
        await run("python3", ["-m", "venv", dir]);
      } catch (err) {
        // Debian ships venv (with ensurepip) apart from python3, and some images lack python3.
        progress(
          `python3 -m venv failed; installing python3 and python3-venv with apt-get (${firstLine(err)})`,
        );
        await aptInstall(["python3", "python3-venv"]);
        await rm(dir, { recursive: true, force: true });
        await run("python3", ["-m", "venv", dir]);
      }
      progress(`pip install moto[server]==${motoVersion}`);
      await run(join(dir, "bin", "pip"), [
        "install",
        "--quiet",
        "--disable-pip-version-check",
        `moto[server]==${motoVersion}`,
      ]);
    }),
  byHand: [
    "apt-get install -y python3 python3-venv   # if python3 -m venv fails",
    `python3 -m venv ${motoDir()}`,
    `${motoDir()}/bin/pip install 'moto[server]==${motoVersion}'`,
    `touch ${motoDir()}/.mlmodel-complete`,
  ].join("\n"),
};

export const azurite: Prerequisite = {
  name: "azurite",
  summary: `Azurite ${azuriteVersion} from npm (about 20 seconds)`,
  check: async () => installedIn(azuriteDir()),
  install: () =>
    installOnce(azuriteDir(), (dir) =>
      run("npm", [
        "install",
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        "--prefix",
        dir,
        `azurite@${azuriteVersion}`,
      ]),
    ),
  byHand: [
    `npm install --prefix ${azuriteDir()} azurite@${azuriteVersion}`,
    `touch ${azuriteDir()}/.mlmodel-complete`,
  ].join("\n"),
};

export const fakeGcs: Prerequisite = {
  name: "fake-gcs",
  summary: `fake-gcs-server ${fakeGcsVersion} built from its Go module (about a minute cold)`,
  check: async () => installedIn(fakeGcsDir()),
  install: () =>
    installOnce(fakeGcsDir(), async (dir) => {
      requireGo("fake-gcs-server");
      await run("go", ["install", `github.com/fsouza/fake-gcs-server@${fakeGcsVersion}`], {
        env: { GOBIN: dir, CGO_ENABLED: "0", GOTOOLCHAIN: "local" },
      });
    }),
  byHand: [
    `GOBIN=${fakeGcsDir()} CGO_ENABLED=0 go install github.com/fsouza/fake-gcs-server@${fakeGcsVersion}`,
    `touch ${fakeGcsDir()}/.mlmodel-complete`,
  ].join("\n"),
};
