/**
 * What teardown (run as root) takes from a journal.json: only what the code itself would have
 * written there. A sysctl outside `touchedSysctls`, a value that is not a sysctl's, or a link
 * that is not the node's own is refused and reported, never acted on: the journal is a file,
 * and a file can be edited.
 */
import { touchedSysctls } from "./config.ts";

/** A sysctl value as /proc/sys shows the ones we touch: integers, separated by blanks. */
const sysctlValue = /^-?\d+([ \t]+-?\d+)*$/;

const known = new Set<string>(touchedSysctls);

export interface CheckedSysctls {
  /** The values to write back, each a known sysctl with a well-formed value. */
  restore: Record<string, string>;
  refused: string[];
}

/** The recorded sysctls teardown may write back, and a sentence for each it refuses. */
export function checkedSysctls(recorded: unknown): CheckedSysctls {
  const restore: Record<string, string> = {};
  const refused: string[] = [];
  if (recorded === undefined) return { restore, refused };
  if (typeof recorded !== "object" || recorded === null || Array.isArray(recorded))
    return { restore, refused: [`journal field sysctls is ${JSON.stringify(recorded)}, not an object`] };
  for (const [name, value] of Object.entries(recorded)) {
    if (!known.has(name))
      refused.push(
        `journal names sysctl ${JSON.stringify(name)}, which the node never changes (it restores only ${touchedSysctls.join(", ")}): left alone`,
      );
    else if (value === undefined || value === null) continue;
    else if (typeof value !== "string" || !sysctlValue.test(value))
      refused.push(
        `journal gives sysctl ${name} the value ${JSON.stringify(value)}, not integers separated by blanks: left alone`,
      );
    else restore[name] = value;
  }
  return { restore, refused };
}

/**
 * The link teardown deletes: always `ours`. When the journal's `field` names another, that one
 * is refused (a sentence) and left alone.
 */
export function checkedLink(field: string, named: unknown, ours: string): { link: string; refused?: string } {
  if (named === undefined || named === ours) return { link: ours };
  return {
    link: ours,
    refused: `journal field ${field} names link ${JSON.stringify(named)}, but the node only ever makes ${ours}: ${JSON.stringify(named)} left alone`,
  };
}

/** The entries of a netns directory that the node's pods made: `cni-*` names absent before it. */
export function netnsToRemove(entries: string[], before: readonly string[]): string[] {
  const existed = new Set(before);
  return entries.filter((name) => name.startsWith("cni-") && !existed.has(name));
}
