// Starts the real storage servers the downloader is tested against, on loopback ports, from the
// cache that `npm test` fills (the prerequisites moto, azurite and fake-gcs that a test file
// declares with `// test-needs:`), plus helpers shared by the tests: a CA and a server
// certificate made with openssl, and a runner for the real `mlmodel download` CLI.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { partialDirFor } from "../../../src/downloader/contract.ts";
import { requireDeclared } from "../../harness/prerequisites/needs.ts";
import { serverPaths } from "../../harness/prerequisites/test-servers.ts";
import { scratchDir } from "../../harness/scratch.ts";

const repoRoot = new URL("../../../", import.meta.url).pathname;

export function tempDir(prefix: string): string {
  return scratchDir(prefix);
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Finds an installed server, or fails saying how to install it. */
function serverBinary(server: keyof typeof serverPaths): string {
  requireDeclared(server);
  const path = serverPaths[server]();
  if (!existsSync(path)) {
    throw new Error(
      `${path} is missing: run the test through npm test (it installs what a file declares with "// test-needs: ${server}"), or: npm run prerequisites -- ${server}`,
    );
  }
  return path;
}

export function motoBinary(): string {
  return serverBinary("moto");
}
/** Azurite's blob entry point, run with this Node (not whatever `node` is first on PATH). */
export function azuriteMain(): string {
  return serverBinary("azurite");
}
export function fakeGcsBinary(): string {
  return serverBinary("fake-gcs");
}

export interface Started {
  url: string;
  stop(): Promise<void>;
}

/** Spawns a server and waits until `ready(url)` answers, failing with its output otherwise. */
export async function startProcess(
  cmd: string,
  args: string[],
  url: string,
  ready: (url: string) => Promise<boolean>,
  env: NodeJS.ProcessEnv = {},
): Promise<Started> {
  const child: ChildProcess = spawn(cmd, args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  let output = "";
  child.stdout?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    output += d.toString();
  });
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await Promise.race([exited, sleep(5000)]);
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  };
  for (let i = 0; i < 300; i++) {
    if (child.exitCode !== null) throw new Error(`${cmd} exited with ${child.exitCode}:\n${output}`);
    if (await ready(url).catch(() => false)) return { url, stop };
    await sleep(100);
  }
  await stop();
  throw new Error(`${cmd} did not become ready at ${url}:\n${output}`);
}

export async function httpAnswers(url: string): Promise<boolean> {
  const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
  await res.arrayBuffer();
  return res.status < 500;
}

/** A throwaway CA and a server certificate for 127.0.0.1, localhost and ::1, made by openssl. */
export function makeCertificates(): { caFile: string; ca: string; key: string; cert: string; dir: string } {
  requireDeclared("openssl");
  const dir = tempDir("pki");
  const run = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  run(
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
    "-days",
    "2",
    "-subj",
    "/CN=mlmodel test CA",
  );
  run(
    "req",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "server.key",
    "-out",
    "server.csr",
    "-subj",
    "/CN=localhost",
  );
  writeFileSync(join(dir, "ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:::1\n");
  run(
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "server.crt",
    "-days",
    "2",
    "-extfile",
    "ext.cnf",
  );
  const read = (f: string) => execFileSync("cat", [join(dir, f)]).toString();
  return {
    caFile: join(dir, "ca.crt"),
    ca: read("ca.crt"),
    key: read("server.key"),
    cert: read("server.crt"),
    dir,
  };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `node src/cli/main.ts download ...` as the Job would, with only the given env added. */
export function runDownload(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<CliResult> & { child: ChildProcess } {
  const child = spawn(process.execPath, [join(repoRoot, "src/cli/main.ts"), "download", ...args], {
    env: { ...process.env, MLMODEL_CREDENTIALS_DIR: "/nonexistent", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const done = new Promise<CliResult>((resolve) => {
    child.on("close", (code, signal) => resolve({ code: code ?? (signal ? 128 : 1), stdout, stderr }));
  });
  return Object.assign(done, { child });
}

/** Random bytes that do not compress, so sizes on the wire are honest. */
export function randomBytes(n: number, seed = 1): Buffer {
  const buf = Buffer.alloc(n);
  let x = seed * 2654435761;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    buf[i] = x & 0xff;
  }
  return buf;
}

/**
 * Leaves DEST as a killed run would: a partial directory for `uri` holding `bytes` as the
 * part of `file`, saved with the validator `version`.
 */
export function seedPartial(dest: string, uri: string, file: string, bytes: Buffer, version: string): void {
  const partial = partialDirFor(dest);
  const part = join(partial, "download", `${file}.mlmodel-part`);
  mkdirSync(dirname(part), { recursive: true });
  writeFileSync(join(partial, ".mlmodel-partial.json"), JSON.stringify({ uri }));
  writeFileSync(part, bytes);
  writeFileSync(`${part}.json`, JSON.stringify({ version }));
}
