/**
 * How output looks: rich (colour, a block progress bar, lines cut to the terminal's width)
 * only for a person at a terminal; plain text when piped, so scripts and `grep` see no escape
 * codes. NO_COLOR (https://no-color.org) turns colour off; `--color always` forces the rich
 * form (e.g. `watch mlmodel status --color always`, or tests).
 */
export type ColorMode = "auto" | "always" | "never";
export const colorModes: readonly ColorMode[] = ["auto", "always", "never"];

export interface Style {
  rich: boolean;
  /** Columns available, when known (rich output only). */
  width?: number;
  bold(text: string): string;
  dim(text: string): string;
  red(text: string): string;
  green(text: string): string;
  yellow(text: string): string;
  cyan(text: string): string;
}

interface Terminal {
  isTTY?: boolean;
  columns?: number;
}

function sgr(open: number, close: number): (text: string) => string {
  return (text) => `\x1b[${open}m${text}\x1b[${close}m`;
}

const identity = (text: string) => text;

export function plainStyle(): Style {
  return {
    rich: false,
    bold: identity,
    dim: identity,
    red: identity,
    green: identity,
    yellow: identity,
    cyan: identity,
  };
}

export function richStyle(width?: number): Style {
  return {
    rich: true,
    ...(width ? { width } : {}),
    bold: sgr(1, 22),
    dim: sgr(2, 22),
    red: sgr(31, 39),
    green: sgr(32, 39),
    yellow: sgr(33, 39),
    cyan: sgr(36, 39),
  };
}

export function styleFor(mode: ColorMode, out: Terminal, env: NodeJS.ProcessEnv = process.env): Style {
  if (mode === "never") return plainStyle();
  if (mode === "always") return richStyle(out.columns);
  const noColor = env.NO_COLOR !== undefined && env.NO_COLOR !== "";
  return out.isTTY && !noColor && env.TERM !== "dumb" ? richStyle(out.columns) : plainStyle();
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching ANSI escape sequences is the point.
const ansi = /\x1b\[[0-9;]*m/g;

/** Length as the terminal shows it: escape codes take no columns. */
export function visibleLength(text: string): number {
  return text.replace(ansi, "").length;
}

export function stripAnsi(text: string): string {
  return text.replace(ansi, "");
}
