/** `mlmodel status [NAME]`: what every model is doing, as a table; `--watch` keeps it current. */
import { mlModelKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import { ApiError, clientSource, type KubeClient, shutdownSignal, watcher } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import {
  checkName,
  commonFlags,
  commonFlagsHelp,
  forDisplay,
  type OutputFormat,
  openSession,
  outputFormat,
  parseCommandLine,
  redacted,
  serialize,
  styleFromFlag,
} from "../views/session.ts";
import { hasRunningCanary, renderStatusTable, statusHeadersFor, statusRow } from "../views/status.ts";
import type { Style } from "../views/style.ts";
import { renderTable } from "../views/table.ts";

export const summary = "show MLModels: phase, replicas, download progress, URL and what is wrong";

const help = `Usage: mlmodel status [NAME] [flags]

Shows MLModels as a table: PHASE, READY (ready/desired replicas), DOWNLOAD (progress of the
model download), URL, AGE and, when a model is not Ready, PROBLEM: the condition that says
why (e.g. ModelDownloaded=False DownloadFailed: ...). A PHASE ending in * describes an older
generation of the spec (the operator has not caught up yet). While a model runs a canary, a
CANARY column shows the split: each serving revision with its ready/total replicas and share
of the traffic, the step and the canary's phase (e.g. r3 4/4 80% · r4 1/1 20% · step 1/1 Paused).

Flags:
  -A, --all-namespaces   every namespace
  -w, --watch            keep watching: redraw on a terminal, one line per change when piped
  -o, --output FORMAT    table (default), json, yaml or name
${commonFlagsHelp}

Examples:
  mlmodel status                         # models in the current namespace
  mlmodel status resnet -n models        # one model
  mlmodel status -A --watch              # every model, kept current
  mlmodel status resnet -o yaml          # the full object
  mlmodel status -o name | xargs -n1 mlmodel describe
  kubectl mlmodel status -A              # the same, as a kubectl plugin`;

const outputs: readonly OutputFormat[] = ["table", "json", "yaml", "name"];

interface Query {
  client: KubeClient;
  namespace?: string;
  name?: string;
}

async function fetchModels(q: Query): Promise<MLModel[]> {
  try {
    if (q.name) {
      const model = await q.client.get<MLModel>(mlModelKind, { namespace: q.namespace, name: q.name });
      if (!model) throw new CliError(`MLModel "${q.name}" not found in namespace "${q.namespace}"`);
      return [redacted(model)];
    }
    return redacted(
      (await q.client.list<MLModel>(mlModelKind, q.namespace ? { namespace: q.namespace } : {})).items,
    );
  } catch (err) {
    throw explainApiError(err);
  }
}

/** A 404 on the kind itself means the CRDs are missing, which a person should hear plainly. */
export function explainApiError(err: unknown): unknown {
  if (err instanceof ApiError && err.code === 404) {
    return new CliError("the MLModel API is not installed in this cluster: run `mlmodel install` first");
  }
  if (err instanceof ApiError && err.code === 403) {
    return new CliError(`not allowed to read MLModels: ${err.message}`);
  }
  return err;
}

function render(
  models: readonly MLModel[],
  format: OutputFormat,
  style: Style,
  allNamespaces: boolean,
  single: boolean,
): string {
  switch (format) {
    case "json":
    case "yaml":
      return serialize(models.map(forDisplay), format, single);
    case "name":
      return models
        .map((m) => `${allNamespaces ? `${m.metadata.namespace}/` : ""}${m.metadata.name}\n`)
        .join("");
    default: {
      const table = renderStatusTable(models, { now: new Date(), style, showNamespace: allNamespaces });
      return table ? `${table}\n` : "";
    }
  }
}

/** One changed model, for piped --watch output: a table line under the first header, or a document. */
function changeLine(
  m: MLModel,
  format: OutputFormat,
  style: Style,
  allNamespaces: boolean,
  deleted: boolean,
): string {
  if (format !== "table") return render([m], format, style, allNamespaces, true);
  const showCanary = hasRunningCanary(m);
  const row = statusRow(m, { now: new Date(), style, showNamespace: allNamespaces, showCanary });
  if (deleted) row[allNamespaces ? 2 : 1] = "Deleted";
  return `${renderTable(statusHeadersFor(allNamespaces, showCanary), [row], style).split("\n")[1]}\n`;
}

/**
 * Lists, then watches (the runtime's watcher: relists after 410 Gone, reconnects with backoff).
 * On a terminal the table is redrawn in place; piped, the first listing is printed whole and
 * then one line (or document) per change, like \`kubectl get -w\`.
 */
async function watch(q: Query, format: OutputFormat, style: Style, allNamespaces: boolean): Promise<void> {
  const signal = shutdownSignal();
  const models = new Map<string, MLModel>();
  const key = (m: MLModel) => `${m.metadata.namespace}/${m.metadata.name}`;
  const selected = (m: MLModel) => !q.name || m.metadata.name === q.name;
  const redraw = style.rich && format === "table";
  const showAll = () => render([...models.values()], format, style, allNamespaces, false);
  let printedOnce = false;
  const source = clientSource<MLModel>(q.client, mlModelKind, q.namespace ? { namespace: q.namespace } : {});
  try {
    for await (const event of watcher(source, { signal })) {
      if (event.type === "init") models.clear();
      else if (event.type === "initApply") {
        if (selected(event.object)) models.set(key(event.object), redacted(event.object));
      } else if (event.type === "initDone") {
        if (redraw) process.stdout.write(`\x1b[H\x1b[2J${showAll() || "No MLModels found.\n"}`);
        else if (!printedOnce) process.stdout.write(showAll());
        printedOnce = true;
      } else if (selected(event.object)) {
        const model = redacted(event.object);
        if (event.type === "delete") models.delete(key(model));
        else models.set(key(model), model);
        if (redraw) process.stdout.write(`\x1b[H\x1b[2J${showAll() || "No MLModels found.\n"}`);
        else process.stdout.write(changeLine(model, format, style, allNamespaces, event.type === "delete"));
      }
    }
  } catch (err) {
    if (!signal.aborted) throw explainApiError(err);
  }
}

export async function run(argv: string[]): Promise<number> {
  const { values: flags, positionals } = parseCommandLine(
    argv,
    {
      ...commonFlags,
      "all-namespaces": { type: "boolean", short: "A" },
      watch: { type: "boolean", short: "w" },
      output: { type: "string", short: "o" },
    },
    help,
  );
  if (flags.help) {
    console.log(help);
    return 0;
  }
  if (positionals.length > 1) {
    throw new CliError(
      `status takes at most one NAME, got ${positionals.length}: ${positionals.join(" ")}`,
      2,
    );
  }
  const name = positionals[0] === undefined ? undefined : checkName("NAME", positionals[0], "MLModel");
  const allNamespaces = flags["all-namespaces"] ?? false;
  if (allNamespaces && name)
    throw new CliError("NAME and --all-namespaces do not go together: pass -n NS with a NAME", 2);
  const format = outputFormat(flags.output, outputs);
  const style = styleFromFlag(flags.color);
  const session = await openSession(flags);
  const q: Query = {
    client: session.client,
    ...(allNamespaces ? {} : { namespace: session.namespace }),
    ...(name ? { name } : {}),
  };
  if (flags.watch) {
    await watch(q, format, style, allNamespaces);
    return 0;
  }
  const models = await fetchModels(q);
  if (models.length === 0 && format === "table") {
    console.error(
      allNamespaces ? "No MLModels found." : `No MLModels found in namespace ${session.namespace}.`,
    );
    return 0;
  }
  process.stdout.write(render(models, format, style, allNamespaces, name !== undefined));
  return 0;
}
