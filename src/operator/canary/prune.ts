/**
 * Model storage around a canary. The canary's model version downloads into its own content
 * directory beside the stable one's (plan.ts), so both are served from one claim, and the
 * prune Job (prune.ts) must keep both while the canary runs. When it ends:
 *
 * - aborted: the canary's content is the loser and goes at the next prune, even though its
 *   revision stays in history (an aborted version is no rollback target; applying it again
 *   downloads it again);
 * - promoted: the old stable's content stays while its revision is kept in history
 *   (revisionHistoryLimit), like any earlier version: it is what `mlmodel rollback` right
 *   after a promotion serves, and it must not need a download then.
 */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import type { CanaryStatus, MLModelSpec } from "../../api/mlmodel.ts";
import { contentToKeep } from "../prune.ts";
import { revisionHash } from "../revisions.ts";

/**
 * Content directories to keep: every served spec's (stable and canary while both serve) and
 * every kept revision's, except the revision of a canary that was aborted (unless served).
 */
export function contentToKeepWithCanary(
  served: readonly MLModelSpec[],
  revisions: readonly V1ControllerRevision[],
  canary: CanaryStatus | undefined,
): string[] {
  // Aborting: the canary still serves (it is in `served`); only once it is gone is it the loser.
  const loser = canary?.phase === "Aborted" ? canary.revision : undefined;
  const kept = revisions.filter((r) => revisionHash(r) !== loser);
  const [first = { model: {} }, ...others] = served;
  const keep = new Set(contentToKeep(first, kept));
  for (const spec of others) for (const hash of contentToKeep(spec, [])) keep.add(hash);
  return [...keep].sort();
}
