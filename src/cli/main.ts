// Entry point of the `mlmodel` CLI: dispatches to one module per command, loaded lazily so
// that `mlmodel download` in a Job does not pay for the operator's imports.
import { CliError } from "./errors.ts";

interface CommandModule {
  run(argv: string[]): Promise<number | undefined>;
  summary: string;
}

// Each helper owns its command file; add a line here when a command lands.
const commands: Record<string, () => Promise<CommandModule>> = {
  backup: () => import("./commands/backup.ts"),
  "cache-copy": () => import("./commands/cache-copy.ts"),
  cluster: () => import("./commands/cluster.ts"),
  completion: () => import("./commands/completion.ts"),
  describe: () => import("./commands/describe.ts"),
  download: () => import("./commands/download.ts"),
  history: () => import("./commands/history.ts"),
  image: () => import("./commands/image.ts"),
  install: () => import("./commands/install.ts"),
  "node-cache": () => import("./commands/node-cache.ts"),
  operator: () => import("./commands/operator.ts"),
  promote: () => import("./commands/promote.ts"),
  restore: () => import("./commands/restore.ts"),
  rollback: () => import("./commands/rollback.ts"),
  status: () => import("./commands/status.ts"),
  start: () => import("./commands/start.ts"),
};

async function usage(): Promise<string> {
  const lines = ["Usage: mlmodel <command> [flags]", "", "Commands:"];
  for (const [name, load] of Object.entries(commands)) {
    const summary = await load()
      .then((m) => m.summary)
      .catch(() => undefined);
    if (summary) lines.push(`  ${name.padEnd(10)} ${summary}`);
  }
  lines.push("", "Run `mlmodel <command> --help` for a command's flags and examples.");
  return lines.join("\n");
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    console.log(await usage());
    return name ? 0 : 2;
  }
  const load = commands[name];
  if (!load) {
    console.error(`mlmodel: unknown command "${name}"\n\n${await usage()}`);
    return 2;
  }
  const command = await load();
  return (await command.run(rest)) ?? 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof CliError) {
      console.error(`mlmodel: ${err.message}`);
      process.exitCode = err.exitCode;
    } else {
      console.error(err);
      process.exitCode = 1;
    }
  },
);
