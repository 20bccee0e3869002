/**
 * What a serving runtime said before it gave up loading its model. A runtime that cannot load
 * the model (MLServer with a pickle it cannot read, a missing file, a wrong implementation)
 * logs why and exits, often with code 0 and no termination message; the kubelet then reports
 * only a crash loop. So when status would tell such a crash as a load failure (status.ts,
 * loadFailureCrash), the previous container's log tail is read through `pods/log` and its
 * relevant lines (pods.ts, runtimeWords) quoted in status.
 *
 * Once per crash: what was read is kept in ModelMemory.crashWords by pod, container and
 * restart count, so a model looked at again while the container waits in its back-off reads
 * nothing more; the next crash (a new restart count) is read once more. At most one read per
 * reconcile (the one crash status tells), of at most `crashLogTail` lines and bytes.
 * A container that wrote a termination message is not read: status quotes that message.
 */
import type { V1Pod } from "@kubernetes/client-node";
import { builtinKinds } from "../../runtime/index.ts";
import { labels } from "../names.ts";
import type { CrashedContainer } from "../pods.ts";
import { runtimeWords } from "../pods.ts";
import { currentRevisionPods, loadFailureCrash } from "../status.ts";
import type { ReadContext, WriteContext } from "./context.ts";
import type { ModelMemory } from "./memory.ts";
import type { Observation } from "./observation.ts";

/**
 * How much of the previous log is read: the tail, where a runtime's last words are. MLServer's
 * traceback of a failed load is 30 to 60 lines, followed by a dozen lines of shutdown.
 */
export const crashLogTail = { lines: 100, bytes: 32_768 };

/**
 * The observation with what the crashed runtime said, when status will tell its crash as a
 * load failure; else as it was. Remembered per crash in `memory` (without it, read each time).
 */
export async function withCrashWords(
  ctx: Pick<ReadContext, "client" | "signal"> & Pick<WriteContext, "log">,
  o: Observation,
  revision: string | undefined,
  memory: ModelMemory | undefined,
): Promise<Observation> {
  if (!o.pods) return o;
  const crash = loadFailureCrash(
    { model: o.model, revision },
    currentRevisionPods(servingPods(o.pods), revision),
  );
  if (!crash || crash.terminationMessage) return o;
  let words = memory?.crashWords.get(crash.key);
  if (words === undefined) {
    words = await readCrashWords(ctx, o.model.metadata.namespace!, crash);
    memory?.crashWords.set(crash.key, words);
  }
  return { ...o, crashWords: new Map([[crash.key, words]]) };
}

function servingPods(pods: readonly V1Pod[]): V1Pod[] {
  return pods.filter((p) => p.metadata?.labels?.[labels.component] === "server");
}

/** The crash's words from its previous log; "" when the log says nothing or cannot be read. */
async function readCrashWords(
  ctx: Pick<ReadContext, "client" | "signal"> & Pick<WriteContext, "log">,
  namespace: string,
  crash: CrashedContainer,
): Promise<string> {
  try {
    const log = await ctx.client.getText(
      builtinKinds.Pod,
      { namespace, name: crash.pod },
      {
        subresource: "log",
        query: {
          container: crash.container,
          previous: "true",
          tailLines: crashLogTail.lines,
          limitBytes: crashLogTail.bytes,
        },
        signal: ctx.signal,
      },
    );
    return runtimeWords(log ?? "");
  } catch (err) {
    if (ctx.signal.aborted) throw err;
    // Not worth failing the reconcile: status still names the load failure, and says where
    // the whole log is (a 403 here means an install without the pods/log rule).
    ctx.log.info(
      { pod: `${namespace}/${crash.pod}`, container: crash.container, error: (err as Error).message },
      "cannot read the previous log of a crashed serving container",
    );
    return "";
  }
}
