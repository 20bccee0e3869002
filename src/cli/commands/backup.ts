/**
 * `mlmodel backup [-n NS | -A] -o FILE`: every MLModel, ServingRuntime and ClusterServingRuntime,
 * and each model's revision history, to one multi-document YAML (src/operator/backup.ts says
 * what is kept; docs/backup.md how to restore it). Reads only; never reads a Secret.
 */
import { renameSync, writeFileSync } from "node:fs";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { clusterServingRuntimeKind, mlModelKind, servingRuntimeKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import { BackupError, buildBackup, type ClusterObjects } from "../../operator/backup.ts";
import { labels, operatorName } from "../../operator/names.ts";
import { builtinKinds, type KubeClient, type KubeObject, type ResourceKind } from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { commonFlags, openSession, parseCommandLine } from "../views/session.ts";
import { explainApiError } from "./status.ts";

export const summary =
  "write MLModels, runtimes and revision histories to a file (restore with `mlmodel restore`)";

const help = `Usage: mlmodel backup [-n NS | -A] -o FILE [flags]

Writes every MLModel of the namespace (or of all namespaces with -A), the namespace's
ServingRuntimes, every ClusterServingRuntime, each model's revision history (the
ControllerRevisions \`mlmodel history\` lists) and the namespaces themselves to FILE, one
multi-document YAML that \`mlmodel restore FILE\` (or \`kubectl apply -f\`, see docs/backup.md)
takes into another cluster.

No Secret is written: a model URI with credentials in it is written redacted, and the file's
header lists, by name, the Secrets (and ConfigMaps and claims) a restore needs to exist first.

Flags:
  -A, --all-namespaces   every namespace
  -o, --output FILE      where to write it ("-" for stdout)
  -n, --namespace NS     namespace (default: the kubeconfig context's, else "default")
      --kubeconfig PATH  cluster to read (default: $KUBECONFIG, ~/.kube/config, in-cluster)

Examples:
  mlmodel backup -n models -o models.yaml
  mlmodel backup -A -o everything.yaml`;

/** Every item of a list, page by page (a backup of thousands of models is several pages). */
export async function listAll<T extends KubeObject>(
  client: KubeClient,
  kind: ResourceKind,
  options: { namespace?: string; labelSelector?: string } = {},
): Promise<T[]> {
  const items: T[] = [];
  let next: string | undefined;
  do {
    const page = await client.list<T>(kind, { ...options, limit: 500, ...(next ? { continue: next } : {}) });
    items.push(...page.items);
    next = page.continue || undefined;
  } while (next);
  return items;
}

/** The selector of every ControllerRevision the operator records. */
export const revisionSelector = `${labels.component}=revision,${labels.managedBy}=${operatorName}`;

/** What a backup holds, read from the cluster: one namespace, or all of them (`namespace` undefined). */
export async function readClusterObjects(
  client: KubeClient,
  namespace: string | undefined,
): Promise<ClusterObjects> {
  const scoped = namespace ? { namespace } : {};
  const [models, runtimes, clusterRuntimes, revisions] = await Promise.all([
    listAll<MLModel>(client, mlModelKind, scoped),
    listAll(client, servingRuntimeKind, scoped),
    listAll(client, clusterServingRuntimeKind),
    listAll(client, builtinKinds.ControllerRevision, { ...scoped, labelSelector: revisionSelector }),
  ]);
  const used = new Set([...models, ...runtimes].map((o) => o.metadata.namespace));
  if (namespace) used.add(namespace);
  const namespaces = namespace
    ? [await client.get<KubeObject>(builtinKinds.Namespace, { name: namespace })].filter(
        (n): n is KubeObject => n !== undefined,
      )
    : (await listAll(client, builtinKinds.Namespace)).filter((n) => used.has(n.metadata.name));
  if (namespace && namespaces.length === 0) {
    throw new CliError(`namespace "${namespace}" not found: nothing to back up`);
  }
  return {
    namespaces,
    clusterRuntimes,
    runtimes,
    models,
    revisions: revisions as unknown as V1ControllerRevision[],
  };
}

export async function run(argv: string[]): Promise<number> {
  const { values: flags } = parseCommandLine(
    argv,
    {
      namespace: commonFlags.namespace,
      kubeconfig: commonFlags.kubeconfig,
      help: commonFlags.help,
      "all-namespaces": { type: "boolean", short: "A" },
      output: { type: "string", short: "o" },
    },
    help,
    false,
  );
  if (flags.help) {
    console.log(help);
    return 0;
  }
  if (!flags.output) throw new CliError(`--output FILE is required (or "-o -" for stdout)\n\n${help}`, 2);
  if (flags["all-namespaces"] && flags.namespace) {
    throw new CliError("--namespace and --all-namespaces exclude each other: give one", 2);
  }
  const { client, namespace } = await openSession(flags);
  const scope = flags["all-namespaces"] ? undefined : namespace;
  const started = performance.now();
  let objects: ClusterObjects;
  try {
    objects = await readClusterObjects(client, scope);
  } catch (err) {
    throw explainApiError(err);
  }
  let backup: ReturnType<typeof buildBackup>;
  try {
    backup = buildBackup(objects, new Date().toISOString(), scope ? `namespace ${scope}` : "all namespaces");
  } catch (err) {
    if (err instanceof BackupError) throw new CliError(err.message);
    throw err;
  }
  writeOutput(flags.output, backup.text);
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  const revisions = backup.contents.models.reduce((n, m) => n + m.revisions.length, 0);
  const where = flags.output === "-" ? "stdout" : flags.output;
  const lines = [
    `backed up ${backup.contents.models.length} MLModel(s) with ${revisions} revision(s), ${backup.contents.runtimes.length} ServingRuntime(s), ${backup.contents.clusterRuntimes.length} ClusterServingRuntime(s) from ${scope ? `namespace ${scope}` : "all namespaces"} to ${where} in ${seconds}s`,
    ...backup.warnings.map((w) => `warning: ${w}`),
  ];
  const needed = backup.requirements.filter((r) => !r.rollbackOnly).length;
  if (backup.requirements.length) {
    lines.push(
      `a restore needs ${needed} Secret(s), ConfigMap(s) or claim(s) to exist first (and ${backup.requirements.length - needed} more to roll back to older revisions): the file's header lists them`,
    );
  }
  process.stderr.write(`${lines.join("\n")}\n`);
  return 0;
}

/** Writes the file whole or not at all: a backup cut short must not look like one. */
function writeOutput(path: string, text: string): void {
  if (path === "-") {
    process.stdout.write(text);
    return;
  }
  const partial = `${path}.partial-${process.pid}`;
  try {
    writeFileSync(partial, text, { mode: 0o600 });
    renameSync(partial, path);
  } catch (err) {
    throw new CliError(`cannot write ${path}: ${(err as Error).message}`);
  }
}
