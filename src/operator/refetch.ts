/**
 * Whether a NodeCache model's version, whose download Job succeeded, is still held by some node
 * (docs/model-cache.md, "A version no node holds"). A succeeded Job means an agent committed the
 * entry once; when every node lost it since (evicted everywhere, or the only node holding it is
 * gone), new serving pods would wait for an entry no agent can give, so the Job is run again.
 *
 * Decided from what the agents wrote and which agents run, never from how long something took:
 * - an agent's state lists what it held when it wrote it (`updatedAt`), and it writes again
 *   whenever that changes, so a state that lists the key is believed while its agent runs;
 * - the node the Job ran on received the entry before the Job completed, and may not have
 *   written since: its agent must have written after the Job completed before its silence
 *   counts as absence (when that node is unknown, every running agent must have);
 * - a state whose node runs no agent any more (the node is gone, or its agent pod was replaced
 *   and its emptyDir with it) holds nothing that anyone can copy.
 */
import type { V1Job, V1Pod } from "@kubernetes/client-node";
import { downloadCacheFlags, type NodeCacheState } from "../nodecache/contract.ts";
import { jobEnd, jobState } from "./status.ts";

export interface CacheHoldersInput {
  /** The version's cache key. */
  key: string;
  /** When its download Job completed (ISO); undefined while it has not. */
  jobCompletedAt: string | undefined;
  /** The node the Job's succeeded pod ran on, whose agent received the entry; undefined when unknown. */
  jobNode: string | undefined;
  /** Every agent's state in the node cache's namespace. */
  states: readonly NodeCacheState[];
  /** The nodes where an agent pod runs now; undefined when they were not read. */
  agentNodes: ReadonlySet<string> | undefined;
}

export type CacheHolders =
  /** A running agent lists the key. */
  | { verdict: "Held"; nodes: string[] }
  /** Nothing can be said yet: the Job has not completed, the agents were not read, or one has yet to report. */
  | { verdict: "Unknown"; why: string }
  /** No node holds the key: its download must run again. */
  | { verdict: "Gone"; message: string };

export function cacheHolders(input: CacheHoldersInput): CacheHolders {
  const { key, jobCompletedAt, jobNode, states, agentNodes } = input;
  const completed = Date.parse(jobCompletedAt ?? "");
  if (Number.isNaN(completed)) return { verdict: "Unknown", why: "the download Job has not completed" };
  if (!agentNodes) return { verdict: "Unknown", why: "the running agents were not read" };
  const listing = states.filter((s) => s.entries.some((e) => e.key === key)).map((s) => s.node);
  const held = listing.filter((node) => agentNodes.has(node)).sort();
  if (held.length > 0) return { verdict: "Held", nodes: held };
  if (agentNodes.size === 0)
    return { verdict: "Unknown", why: "no node cache agent runs: a new download could store nothing" };
  const stateOf = new Map(states.map((s) => [s.node, s]));
  const reportedSince = (node: string) => {
    const at = Date.parse(stateOf.get(node)?.updatedAt ?? "");
    return !Number.isNaN(at) && at >= completed;
  };
  const mustReport = jobNode ? (agentNodes.has(jobNode) ? [jobNode] : []) : [...agentNodes];
  const silent = mustReport.filter((node) => !reportedSince(node)).sort();
  if (silent.length > 0) {
    return {
      verdict: "Unknown",
      why: `the agent on ${silent.join(", ")} has not reported since the download Job completed`,
    };
  }
  const gone = listing.filter((node) => !agentNodes.has(node) && node !== jobNode).sort();
  const lost = gone.length > 0 ? `; it was on ${gone.join(", ")}, where no agent runs any more` : "";
  return {
    verdict: "Gone",
    message: `no node holds cache entry ${key}: none of the ${agentNodes.size} running node cache agent(s) lists it, ${since(jobNode, agentNodes)}${lost}; downloading it again`,
  };
}

/** What made the absence certain: the receiving agent's report, or every agent's. */
function since(jobNode: string | undefined, agentNodes: ReadonlySet<string>): string {
  if (!jobNode) return "each in a report written since its download Job completed";
  if (agentNodes.has(jobNode))
    return `and the agent on ${jobNode}, where its download Job ran, has reported without it since the Job completed`;
  return `and ${jobNode}, where its download Job ran, runs no agent any more`;
}

/** When a Job completed (ISO), or undefined while it has not. */
export function jobCompletedAt(job: V1Job | undefined): string | undefined {
  if (jobState(job) !== "Complete") return undefined;
  const at = job?.status?.completionTime ?? jobEnd(job!)?.lastTransitionTime;
  return at === undefined ? undefined : new Date(at as unknown as string).toISOString();
}

/** The cache key a NodeCache download Job stores (its `--cache-key`), or undefined. */
export function jobCacheKey(job: V1Job): string | undefined {
  const args = job.spec?.template.spec?.containers?.[0]?.args ?? [];
  const at = args.indexOf(downloadCacheFlags.key);
  return at >= 0 ? args[at + 1] : undefined;
}

/** The node a Job's succeeded pod ran on, among `pods` (matched by owner), or undefined. */
export function jobNodeOf(job: V1Job, pods: readonly V1Pod[]): string | undefined {
  const uid = job.metadata?.uid;
  const ran = pods.find(
    (p) =>
      p.status?.phase === "Succeeded" &&
      p.spec?.nodeName &&
      p.metadata?.ownerReferences?.some((o) => o.uid === uid),
  );
  return ran?.spec?.nodeName;
}

/** Whether an agent pod counts as running on its node: bound, not ended, not being deleted. */
export function agentRuns(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return (
    Boolean(pod.spec?.nodeName) &&
    !pod.metadata?.deletionTimestamp &&
    phase !== "Failed" &&
    phase !== "Succeeded"
  );
}
