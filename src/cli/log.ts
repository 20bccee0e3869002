/**
 * The operator's log where a person reads it: one short line per record,
 * `HH:MM:SS LEVEL message model=namespace/name key=value ...`, written to stderr.
 *
 * An error the operator expects and handles (the API server answered with an error status, it
 * could not be reached, a watch went silent, a terminal reconcile error) is shown by its message
 * alone; any other error keeps its stack trace, indented under the line. JSON (pino's own
 * format) stays what `mlmodel operator` writes by default, for log collectors.
 */
import pino, { type Logger } from "pino";
import { redactText } from "../downloader/redact.ts";
import { ApiError, isUnreachable, TerminalError, WatchInactivityError } from "../runtime/index.ts";
import { CliError } from "./errors.ts";

export const logLevels = ["trace", "debug", "info", "warn", "error"] as const;

/** `level` when it is one of logLevels; else a usage error naming where it came from (`what`). */
export function checkedLevel(level: string, what: string): string {
  if ((logLevels as readonly string[]).includes(level)) return level;
  throw new CliError(`${what} "${level}" is not one of ${logLevels.join(", ")}`, 2);
}

const levelNames: Record<number, string> = {
  10: "TRACE",
  20: "DEBUG",
  30: "INFO",
  40: "WARN",
  50: "ERROR",
  60: "FATAL",
};

/** Fields a person does not need on every line (the model is shown as one `model=` field). */
const hidden = new Set(["time", "level", "msg", "pid", "hostname", "reconcileId", "controller"]);

/** True for the errors the runtime handles as part of its normal work: no stack trace for them. */
export function isExpectedError(err: unknown): boolean {
  if (err instanceof ApiError || err instanceof WatchInactivityError || err instanceof TerminalError)
    return true;
  if (err instanceof Error && err.name === "AbortError") return true;
  return isUnreachable(err);
}

/** pino's error serializer, without the stack for an expected error. */
export function humanErrorSerializer(err: unknown): unknown {
  const serialized = pino.stdSerializers.err(err as Error) as unknown;
  if (!isExpectedError(err) || typeof serialized !== "object" || serialized === null) return serialized;
  const { stack: _stack, ...rest } = serialized as Record<string, unknown>;
  return rest;
}

/** Where humanLogger puts a child logger's bindings (controller, kind, namespace, name). */
const boundKey = "@bound";

/**
 * One pino record (a JSON line) as a human line. A record of humanLogger carries its logger's
 * bindings under "@bound": the object a controller's logger is bound to is shown as one
 * `model=namespace/name` field, and the bound kind, namespace and name are not repeated; a
 * record's own `kind` or `name` (a child's) is shown.
 */
export function formatHuman(line: string): string {
  const record = JSON.parse(line) as Record<string, unknown>;
  const time = new Date(Number(record["time"]));
  const clock = [time.getHours(), time.getMinutes(), time.getSeconds()]
    .map((n) => String(n).padStart(2, "0"))
    .join(":");
  const level = (levelNames[Number(record["level"])] ?? String(record["level"])).padEnd(5);
  const bound = (record[boundKey] ?? {}) as Record<string, unknown>;
  const fields: string[] = [];
  if (typeof bound["namespace"] === "string" && typeof bound["name"] === "string") {
    const label = bound["controller"] === "mlmodel" ? "model" : "object";
    fields.push(`${label}=${bound["namespace"]}/${bound["name"]}`);
  }
  let stack: string | undefined;
  for (const [key, value] of Object.entries(record)) {
    if (hidden.has(key) || key === boundKey) continue;
    if ((key === "kind" || key === "namespace" || key === "name") && value === bound[key]) continue;
    if (key === "err" && typeof value === "object" && value !== null) {
      const err = value as { message?: unknown; stack?: unknown };
      fields.push(`err=${quoted(typeof err.message === "string" ? err.message : JSON.stringify(value))}`);
      if (typeof err.stack === "string") stack = err.stack;
      continue;
    }
    fields.push(`${key}=${typeof value === "string" ? quoted(value) : JSON.stringify(value)}`);
  }
  const head = [clock, level, String(record["msg"] ?? ""), ...fields].join(" ");
  return stack ? `${head}\n${indent(stack)}` : head;
}

/** A destination for pino that writes each record as a human line to `out`. */
export function humanDestination(out: { write(text: string): unknown }): { write(line: string): void } {
  return {
    write: (chunk) => {
      for (const line of chunk.split("\n")) if (line) out.write(`${formatHuman(line)}\n`);
    },
  };
}

/**
 * Log lines leave with every URI in them redacted (redactText): a model URI may be a
 * pre-signed URL, and an error the API server or a library returns may quote one.
 */
export function redacting(out: { write(line: string): unknown }): { write(line: string): void } {
  return {
    write: (line) => {
      out.write(redactText(line));
    },
  };
}

/** A logger writing human lines (redacted) to `out`, stderr by default. */
export function humanLogger(level: string, out: { write(text: string): unknown } = process.stderr): Logger {
  return pino(
    {
      level,
      serializers: { err: humanErrorSerializer },
      // A record's own fields may repeat a binding's name (a child's `name`); the bindings are
      // passed apart so the formatter tells the model from the child.
      mixin: (_record, _level, logger) => ({ [boundKey]: logger.bindings() }),
    },
    redacting(humanDestination(out)),
  );
}

/** A logger writing pino's JSON lines (redacted) to `out`, stdout by default. */
export function jsonLogger(
  level: string,
  out: { write(text: string): unknown } = pino.destination(1),
): Logger {
  return pino({ level }, redacting(out));
}

function quoted(text: string): string {
  return /^[^\s"=]+$/.test(text) ? text : JSON.stringify(text);
}

function indent(text: string): string {
  return text
    .split("\n")
    .map((l) => `    ${l.trim()}`)
    .join("\n");
}
