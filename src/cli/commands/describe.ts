/** `mlmodel describe NAME`: one MLModel in full: status, conditions, revisions, children, events. */
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import { httpRouteKind } from "../../operator/canary/desired.ts";
import { labels } from "../../operator/names.ts";
import { ApiError, builtinKinds, type KubeClient, type KubeObject } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { type ChildSummary, type EventObject, renderDescribe, summarizeChild } from "../views/describe.ts";
import {
  commonFlags,
  commonFlagsHelp,
  forDisplay,
  openSession,
  outputFormat,
  parseModelCommand,
  redacted,
  serialize,
  styleFromFlag,
} from "../views/session.ts";
import { explainApiError } from "./status.ts";

export const summary = "show one MLModel in detail: conditions, revisions, children and events";

const help = `Usage: mlmodel describe NAME [flags]

Shows one MLModel: its phase and message, model source, runtime, replicas, URLs, download
progress, every condition (the one that explains a problem is marked), the revision history,
the objects the operator made for it (claim, download Job, Deployment, Service, pods,
autoscaler, and a canary's Deployment, Services and HTTPRoute) with their state, the canary
(its phase, step, split, URLs, and each revision serving with its replicas and share of the
traffic), the storage mode and, with the node cache, per node what is cached, its size and
where it came from (bytes from the origin vs from peers), and the events about the model and
its children.

Flags:
  -o, --output FORMAT    text (default), json or yaml (the model, its children and events)
${commonFlagsHelp}

Examples:
  mlmodel describe resnet
  mlmodel describe resnet -n models --color never > resnet.txt
  kubectl mlmodel describe resnet`;

// Children in the order a model is built: storage, download, serving, endpoint, scaling, pods.
const childKinds = [
  builtinKinds.PersistentVolumeClaim,
  builtinKinds.Job,
  builtinKinds.Deployment,
  builtinKinds.Service,
  builtinKinds.HorizontalPodAutoscaler,
  builtinKinds.Pod,
];

async function readChildren(client: KubeClient, namespace: string, name: string): Promise<KubeObject[]> {
  const labelSelector = `${labels.model}=${name}`;
  const lists = await Promise.all([
    ...childKinds.map((kind) => client.list(kind, { namespace, labelSelector })),
    // A canary's HTTPRoute, where the cluster has the Gateway API (a 404: it does not).
    client.list(httpRouteKind, { namespace, labelSelector }).catch((err: unknown) => {
      if (err instanceof ApiError && err.code === 404) return { items: [] as KubeObject[] };
      throw err;
    }),
  ]);
  return lists.flatMap((l) => l.items);
}

/** Events about the model, and Warning events about its children (why a pod cannot start). */
async function readEvents(
  client: KubeClient,
  model: MLModel,
  children: readonly KubeObject[],
): Promise<EventObject[]> {
  const childKeys = new Set(children.map((c) => `${c.kind}/${c.metadata.name}`));
  const list = await client.list<EventObject & { regarding?: { kind?: string; name?: string } }>(
    builtinKinds.Event,
    { namespace: model.metadata.namespace },
  );
  return list.items.filter((e) => {
    const about = `${e.regarding?.kind}/${e.regarding?.name}`;
    return about === `MLModel/${model.metadata.name}` || (e.type === "Warning" && childKeys.has(about));
  });
}

export async function run(argv: string[]): Promise<number> {
  const parsed = parseModelCommand(
    "describe",
    argv,
    { ...commonFlags, output: { type: "string", short: "o" } },
    help,
  );
  if (!parsed) return 0;
  const { flags, name } = parsed;
  const format = outputFormat(flags.output, ["text", "json", "yaml"]);
  const style = styleFromFlag(flags.color);
  const { client, namespace } = await openSession(flags);
  try {
    const found = await client.get<MLModel>(mlModelKind, { namespace, name });
    if (!found) throw new CliError(`MLModel "${name}" not found in namespace "${namespace}"`);
    const model = redacted(found);
    const children = redacted(await readChildren(client, namespace, name));
    const events = redacted(await readEvents(client, model, children));
    if (format === "json" || format === "yaml") {
      const all = [model, ...children, ...events].map(forDisplay);
      process.stdout.write(serialize(all, format, false));
      return 0;
    }
    const summaries: ChildSummary[] = children.map(summarizeChild);
    process.stdout.write(
      `${renderDescribe({ model, children: summaries, events, now: new Date(), style })}\n`,
    );
    return 0;
  } catch (err) {
    throw explainApiError(err);
  }
}
