/**
 * A throwaway containerd of the test's own (root, state, socket, runc root and cgroup parent
 * under a temp dir; the CRI plugin off, so no CNI or iptables), to import image archives with
 * `ctr images import` as a node would and run them with `ctr run` as a pod would: as the image's
 * user, no capabilities, no new privileges, the runtime's default seccomp profile, optionally a
 * read-only root filesystem, on the host's network so that only loopback is used.
 *
 * It never touches the machine's or a real node's containerd.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readdirSync, rmdirSync } from "node:fs";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

/** containerd's default capability set (oci/spec.go): every one is dropped, as `drop: [ALL]` does. */
const defaultCapabilities = [
  "CHOWN",
  "DAC_OVERRIDE",
  "FSETID",
  "FOWNER",
  "MKNOD",
  "NET_RAW",
  "SETGID",
  "SETUID",
  "SETFCAP",
  "SETPCAP",
  "NET_BIND_SERVICE",
  "SYS_CHROOT",
  "KILL",
  "AUDIT_WRITE",
];

export interface Mount {
  type: "bind" | "tmpfs";
  source: string;
  destination: string;
  options: string[];
}

export interface RunOptions {
  ref: string;
  /** The whole command line (ctr replaces the image's entrypoint and cmd, as a pod's `command` does). */
  args: string[];
  env?: Record<string, string>;
  readOnlyRootfs?: boolean;
  mounts?: Mount[];
}

export interface Exit {
  code: number;
  stdout: string;
  stderr: string;
}

function collect(child: ChildProcess): Promise<Exit> {
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr?.on("data", (c: Buffer) => {
    stderr += c.toString();
  });
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });
}

export class Containerd {
  readonly dir: string;
  readonly address: string;
  readonly cgroupParent: string;
  private readonly daemon: ChildProcess;
  private count = 0;

  private constructor(dir: string, daemon: ChildProcess) {
    this.dir = dir;
    this.address = join(dir, "containerd.sock");
    this.daemon = daemon;
    this.cgroupParent = `mlmodel-image-test-${process.pid}`;
  }

  static async start(dir: string): Promise<Containerd> {
    await mkdir(dir, { recursive: true });
    const config = [
      "version = 2",
      `root = "${join(dir, "root")}"`,
      `state = "${join(dir, "state")}"`,
      'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
      "[grpc]",
      `  address = "${join(dir, "containerd.sock")}"`,
      "[ttrpc]",
      `  address = "${join(dir, "containerd.sock.ttrpc")}"`,
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = "${join(dir, "opt")}"`,
    ].join("\n");
    await writeFile(join(dir, "config.toml"), `${config}\n`);
    const daemon = spawn("containerd", ["--config", join(dir, "config.toml")], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let log = "";
    daemon.stderr?.on("data", (c: Buffer) => {
      log = (log + c.toString()).slice(-4000);
    });
    const ctd = new Containerd(dir, daemon);
    for (let i = 0; i < 150; i++) {
      if (daemon.exitCode !== null) throw new Error(`containerd exited (${daemon.exitCode}):\n${log}`);
      if (existsSync(ctd.address) && (await ctd.ctr(["version"])).code === 0) return ctd;
      await sleep(200);
    }
    await ctd.stop();
    throw new Error(`containerd did not answer on ${ctd.address} within 30 s:\n${log}`);
  }

  ctr(args: string[]): Promise<Exit> {
    return collect(
      spawn("ctr", ["--address", this.address, "--namespace", "k8s.io", ...args], {
        stdio: ["ignore", "pipe", "pipe"],
      }),
    );
  }

  async importArchive(archive: string): Promise<Exit> {
    return this.ctr(["images", "import", archive]);
  }

  private runArgs(id: string, opts: RunOptions): string[] {
    const args = [
      "run",
      "--rm",
      "--net-host",
      "--seccomp",
      "--runc-root",
      join(this.dir, "runc"),
      "--fifo-dir",
      join(this.dir, "fifo"),
      "--cgroup",
      `/${this.cgroupParent}/${id}`,
      ...defaultCapabilities.flatMap((c) => ["--cap-drop", `CAP_${c}`]),
    ];
    if (opts.readOnlyRootfs) args.push("--read-only");
    for (const [name, value] of Object.entries(opts.env ?? {})) args.push("--env", `${name}=${value}`);
    for (const m of opts.mounts ?? []) {
      args.push(
        "--mount",
        `type=${m.type},src=${m.source},dst=${m.destination},options=${m.options.join(":")}`,
      );
    }
    return [...args, opts.ref, id, ...opts.args];
  }

  /** Runs a container to completion. */
  async run(opts: RunOptions): Promise<Exit> {
    const id = `t${process.pid}-${++this.count}`;
    return this.ctr(this.runArgs(id, opts));
  }

  /** Starts a long-running container; `stop` kills it and waits until ctr has removed it. */
  start(opts: RunOptions): { id: string; exited: Promise<Exit>; stop: () => Promise<Exit> } {
    const id = `t${process.pid}-${++this.count}`;
    const child = spawn(
      "ctr",
      ["--address", this.address, "--namespace", "k8s.io", ...this.runArgs(id, opts)],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const exited = collect(child);
    const stop = async () => {
      await this.ctr(["tasks", "kill", "--signal", "SIGKILL", id]);
      return exited;
    };
    return { id, exited, stop };
  }

  /** Kills every container, stops containerd, removes its cgroups and its directory. */
  async stop(): Promise<void> {
    if (this.daemon.exitCode === null) {
      const tasks = await this.ctr(["tasks", "ls", "--quiet"]);
      for (const id of tasks.stdout.split("\n").filter(Boolean)) {
        await this.ctr(["tasks", "kill", "--signal", "SIGKILL", id]);
        await sleep(200);
        await this.ctr(["tasks", "delete", id]);
        await this.ctr(["containers", "delete", id]);
      }
      this.daemon.kill("SIGTERM");
      for (let i = 0; i < 50 && this.daemon.exitCode === null && this.daemon.signalCode === null; i++)
        await sleep(100);
      if (this.daemon.exitCode === null && this.daemon.signalCode === null) this.daemon.kill("SIGKILL");
    }
    for (const hierarchy of existsSync("/sys/fs/cgroup") ? readdirSync("/sys/fs/cgroup") : []) {
      const parent = join("/sys/fs/cgroup", hierarchy, this.cgroupParent);
      try {
        rmdirSync(parent);
      } catch {
        // absent (never used) or, if a container outlived us, left for the kernel to report
      }
    }
    await rm(this.dir, { recursive: true, force: true });
  }
}
