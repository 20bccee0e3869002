/**
 * What the read-only commands (status, describe) share: flags common to them, the kubeconfig
 * and namespace they act on (as kubectl picks them), and -o json|yaml output.
 */
import { type ParseArgsConfig, parseArgs } from "node:util";
import { stringify } from "yaml";
import { redactText } from "../../downloader/redact.ts";
import { isDnsLabel, type KubeClient, type KubeObject } from "../../runtime/index.ts";
import { cliClient, loadKubeConfig } from "../commands/kubeconfig-flag.ts";
import { CliError } from "../errors.ts";
import { type ColorMode, colorModes, type Style, styleFor } from "./style.ts";

export const commonFlagsHelp = `  -n, --namespace NS    namespace (default: the kubeconfig context's, else "default")
      --kubeconfig PATH  cluster to read (default: $KUBECONFIG, ~/.kube/config, in-cluster)
      --color WHEN       auto (colour only on a terminal, off with NO_COLOR), always or never`;

export const commonFlags = {
  namespace: { type: "string", short: "n" },
  kubeconfig: { type: "string" },
  color: { type: "string", default: "auto" },
  help: { type: "boolean", short: "h" },
} as const;

/** Flags and positionals, or a usage error (exit 2) that shows the command's help. */
export function parseCommandLine<O extends NonNullable<ParseArgsConfig["options"]>>(
  argv: string[],
  options: O,
  help: string,
  allowPositionals = true,
) {
  try {
    return parseArgs({ args: argv, options, allowPositionals, strict: true });
  } catch (err) {
    throw new CliError(`${(err as Error).message}\n\n${help}`, 2);
  }
}

export interface Session {
  client: KubeClient;
  namespace: string;
}

export function checkName(flag: string, value: string, what: string): string {
  if (value.length > 253 || !/^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$/.test(value)) {
    throw new CliError(
      `${flag} "${value}" is not a valid ${what} name: use lowercase letters, digits, '-' and '.', starting and ending with a letter or digit`,
      2,
    );
  }
  return value;
}

/** The one MLModel NAME that describe, history and rollback take, or a usage error (exit 2). */
function singleModelName(command: string, positionals: string[], help: string): string {
  if (positionals.length !== 1) {
    throw new CliError(`${command} takes exactly one NAME, got ${positionals.length}\n\n${help}`, 2);
  }
  return checkName("NAME", positionals[0]!, "MLModel");
}

/**
 * The command line of a command on one MLModel (describe, history, rollback): its flags and
 * the NAME, or undefined once `--help` has been printed.
 */
export function parseModelCommand<O extends typeof commonFlags & NonNullable<ParseArgsConfig["options"]>>(
  command: string,
  argv: string[],
  options: O,
  help: string,
) {
  const { values: flags, positionals } = parseCommandLine(argv, options, help);
  if ((flags as { help?: boolean }).help) {
    console.log(help);
    return undefined;
  }
  return { flags, name: singleModelName(command, positionals, help) };
}

export async function openSession(flags: { kubeconfig?: string; namespace?: string }): Promise<Session> {
  const kc = loadKubeConfig(
    flags.kubeconfig,
    "pass --kubeconfig PATH or set KUBECONFIG (e.g. KUBECONFIG=$(mlmodel cluster kubeconfig))",
  );
  const fromContext = kc.getContextObject(kc.getCurrentContext())?.namespace;
  const namespace = flags.namespace ?? fromContext ?? "default";
  if (!isDnsLabel(namespace)) {
    throw new CliError(
      `--namespace "${namespace}" is not a valid namespace name: lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit`,
      2,
    );
  }
  return { client: cliClient(kc), namespace };
}

export function styleFromFlag(value: string, out: NodeJS.WriteStream = process.stdout): Style {
  if (!(colorModes as readonly string[]).includes(value)) {
    throw new CliError(`--color "${value}" must be one of ${colorModes.join(", ")}`, 2);
  }
  return styleFor(value as ColorMode, out);
}

export type OutputFormat = "table" | "text" | "json" | "yaml" | "name";

/** Checks -o against what the command prints; the first allowed format is the default. */
export function outputFormat(value: string | undefined, allowed: readonly OutputFormat[]): OutputFormat {
  const format = value ?? allowed[0]!;
  if (!(allowed as readonly string[]).includes(format)) {
    throw new CliError(`--output "${format}" must be one of ${allowed.join(", ")}`, 2);
  }
  return format as OutputFormat;
}

/** Objects as kubectl -o json|yaml prints them: one object alone, several as a List. */
export function serialize(objects: readonly KubeObject[], format: "json" | "yaml", single: boolean): string {
  const value = single ? objects[0] : { apiVersion: "v1", kind: "List", items: objects, metadata: {} };
  return format === "json" ? `${JSON.stringify(value, null, 2)}\n` : stringify(value, { lineWidth: 0 });
}

/**
 * A value with every string in it passed through redactText: what any view prints. A model
 * URI may carry credentials (a pre-signed URL's signature, a SAS, a token), in spec.model.uri,
 * in a kubectl last-applied annotation, in what an older operator wrote to status.
 */
export function redacted<T>(value: T): T {
  if (typeof value === "string") return redactText(value) as T;
  if (Array.isArray(value)) return value.map(redacted) as T;
  if (value && typeof value === "object")
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redacted(v)])) as T;
  return value;
}

/** Drops managedFields (noise to a person, and kubectl hides them too); redacts URIs. */
export function forDisplay<T extends KubeObject>(obj: T): T {
  const { managedFields: _managed, ...metadata } = obj.metadata as KubeObject["metadata"] & {
    managedFields?: unknown;
  };
  return redacted({ ...obj, metadata } as T);
}
