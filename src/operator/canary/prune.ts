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
import type { CanaryStatus } from "../../api/mlmodel.ts";
import type { ServingPlan } from "../plan.ts";
import { contentToKeep } from "../prune.ts";
import { revisionHash } from "../revisions.ts";

/**
 * Content directories to keep: every served plan's (stable and canary while both serve) and
 * every kept revision's, except the revision of a canary that was aborted (unless served).
 * Plans, not specs: a revision whose URI was recorded redacted knows its content only from
 * its recorded source (RecordedSource), which its plan carries.
 */
export function contentToKeepWithCanary(
  served: readonly Pick<ServingPlan, "source">[],
  revisions: readonly V1ControllerRevision[],
  canary: CanaryStatus | undefined,
): string[] {
  // Aborting: the canary still serves (it is in `served`); only once it is gone is it the loser.
  const loser = canary?.phase === "Aborted" ? canary.revision : undefined;
  const kept = revisions.filter((r) => revisionHash(r) !== loser);
  return contentToKeep(served, kept);
}
