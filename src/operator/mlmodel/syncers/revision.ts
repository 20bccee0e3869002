/** Syncer: records the spec's revision as a ControllerRevision (or renumbers it as the newest). */
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { builtinKinds, type KubeObject } from "../../../runtime/index.ts";
import { fieldManager, labels } from "../../names.ts";
import type { WriteContext } from "../context.ts";
import { withAnswer } from "./apply.ts";

/** Applies `want` and returns the revisions as they stand after: `want` replaces its cached copy. */
export async function recordRevision(
  ctx: WriteContext,
  want: V1ControllerRevision,
  revisions: readonly V1ControllerRevision[],
): Promise<V1ControllerRevision[]> {
  ctx.log.info(
    { revision: want.revision, hash: want.metadata?.labels?.[labels.revision] },
    "recording revision",
  );
  // Only the uid and resourceVersion of the answer are read (a URI Secret is owned by the
  // revision's uid; a create's version is its echo, wakes.ts): the rest is `want` as applied.
  const answer = await ctx.client.applyForVersion(
    builtinKinds.ControllerRevision,
    want as unknown as KubeObject,
    {
      fieldManager,
      force: true,
      signal: ctx.signal,
    },
  );
  const applied = withAnswer(want, answer);
  return [...revisions.filter((r) => r.metadata?.name !== applied.metadata?.name), applied];
}
