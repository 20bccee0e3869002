/**
 * `mlmodel restore FILE`: recreates what `mlmodel backup` wrote, so that each model serves the
 * same revision, `mlmodel history` lists the same revisions under the same numbers, and
 * `mlmodel rollback --to-revision N` works. Everything is checked before anything is written:
 * the file, the models already there, and the Secrets (ConfigMaps, claims) the models need,
 * which a backup never holds. docs/backup.md says what happens to status and owners.
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { V1ControllerRevision } from "@kubernetes/client-node";
import { clusterServingRuntimeKind, mlModelKind, servingRuntimeKind } from "../../api/kinds.ts";
import type { MLModel } from "../../api/mlmodel.ts";
import {
  type BackupContents,
  BackupError,
  type ModelBackup,
  modelToRestore,
  parseBackup,
  type Requirement,
  requirementsOf,
  revisionsNotInBackup,
  revisionsToRenumber,
  revisionToRestore,
  sameContent,
  statusMemory,
  uriSecretOf,
} from "../../operator/backup.ts";
import { uriSecretKey } from "../../operator/desired.ts";
import { labels } from "../../operator/names.ts";
import { recordedSource, revisionHash } from "../../operator/revisions.ts";
import {
  ApiError,
  builtinKinds,
  controllerOwnerRef,
  type KubeClient,
  type KubeObject,
  type ResourceKind,
} from "../../runtime/index.ts";
import { CliError } from "../errors.ts";
import { commonFlags, openSession, parseCommandLine } from "../views/session.ts";
import { listAll, revisionSelector } from "./backup.ts";
import { explainApiError } from "./status.ts";

export const summary = "recreate what `mlmodel backup` wrote: models, runtimes and revision histories";

const help = `Usage: mlmodel restore FILE [flags]

Recreates the namespaces (when missing), ClusterServingRuntimes, ServingRuntimes and MLModels
of a backup, each model with its revision history under the same numbers, and re-attaches the
URI Secrets of its revisions. The operator then serves each model's revision as before.

Checked before anything is written: that FILE is a backup; that no MLModel of the same name
exists (unless --overwrite) and no runtime of the same name says something else; and that the
Secrets, ConfigMaps and claims the models serve with exist (a backup holds no Secret: its
header lists them by name). Missing ones needed only to roll back to an older revision are
warnings.

Flags:
      --overwrite        replace MLModels (spec, labels, history) and runtimes of the same name
      --allow-missing    restore even when a Secret, ConfigMap or claim a model needs is missing
      --dry-run          check everything and say what would be written, write nothing
      --concurrency N    models restored in parallel (default 16)
  -n, --namespace NS     restore only this namespace of the file
      --kubeconfig PATH  cluster to restore into (default: $KUBECONFIG, ~/.kube/config, in-cluster)

Examples:
  mlmodel restore models.yaml
  mlmodel restore everything.yaml -n models --dry-run`;

/** The field manager of restore's writes: the operator's own writes stay its own. */
const restoreManager = "mlmodel-restore";

export interface Flags {
  overwrite: boolean;
  allowMissing: boolean;
  dryRun: boolean;
  concurrency: number;
}

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommandLine(
    argv,
    {
      namespace: commonFlags.namespace,
      kubeconfig: commonFlags.kubeconfig,
      help: commonFlags.help,
      overwrite: { type: "boolean" },
      "allow-missing": { type: "boolean" },
      "dry-run": { type: "boolean" },
      concurrency: { type: "string", default: "16" },
    },
    help,
  );
  if (values.help) {
    console.log(help);
    return 0;
  }
  if (positionals.length !== 1) {
    throw new CliError(`restore takes exactly one FILE, got ${positionals.length}\n\n${help}`, 2);
  }
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    throw new CliError(`--concurrency "${values.concurrency}" must be a whole number from 1 to 64`, 2);
  }
  const file = positionals[0]!;
  const contents = onlyNamespace(readBackup(file), values.namespace, file);
  const { client } = await openSession({ ...(values.kubeconfig ? { kubeconfig: values.kubeconfig } : {}) });
  const flags: Flags = {
    overwrite: values.overwrite ?? false,
    allowMissing: values["allow-missing"] ?? false,
    dryRun: values["dry-run"] ?? false,
    concurrency,
  };
  const started = performance.now();
  try {
    const checked = await check(client, contents, flags);
    for (const w of checked.warnings) process.stderr.write(`warning: ${w}\n`);
    if (flags.dryRun) {
      console.log(describePlan(contents, checked));
      return 0;
    }
    const restored = await restore(client, contents, checked, flags);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    for (const w of restored.warnings) process.stderr.write(`warning: ${w}\n`);
    console.log(
      `restored ${restored.models} MLModel(s) with ${restored.revisions} revision(s) and ${checked.runtimesToWrite.size} of ${contents.runtimes.length + contents.clusterRuntimes.length} runtime(s) (the others were there as backed up) in ${seconds}s (${restored.renumbered} revision number(s) the operator had taken set back)`,
    );
    return 0;
  } catch (err) {
    throw explainApiError(err);
  }
}

function readBackup(file: string): BackupContents {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new CliError(`cannot read ${file}: ${(err as Error).message}`);
  }
  try {
    return parseBackup(text, file);
  } catch (err) {
    if (err instanceof BackupError) throw new CliError(err.message);
    throw err;
  }
}

/** The file's objects of one namespace (and the cluster-scoped runtimes), when -n is given. */
function onlyNamespace(
  contents: BackupContents,
  namespace: string | undefined,
  file: string,
): BackupContents {
  if (!namespace) return contents;
  const inFile = new Set(contents.models.map((m) => m.model.metadata.namespace));
  for (const r of contents.runtimes) inFile.add(r.metadata.namespace);
  if (!inFile.has(namespace)) {
    throw new CliError(
      `--namespace "${namespace}": ${file} holds no object of that namespace (it holds ${[...inFile].sort().join(", ") || "none"})`,
      2,
    );
  }
  return {
    namespaces: contents.namespaces.filter((n) => n.metadata.name === namespace),
    clusterRuntimes: contents.clusterRuntimes,
    runtimes: contents.runtimes.filter((r) => r.metadata.namespace === namespace),
    models: contents.models.filter((m) => m.model.metadata.namespace === namespace),
  };
}

/** What the checks found: what exists already, and the exact URIs read from their Secrets. */
export interface Checked {
  existingNamespaces: Set<string>;
  /** The backup's MLModels that exist already ("ns/name"): replaced with --overwrite. */
  existingModels: Map<string, MLModel>;
  /** Runtimes to write ("Kind/ns/name"): missing ones, and different ones with --overwrite. */
  runtimesToWrite: Set<string>;
  exactUris: Map<string, string>;
  /** Requirements that exist: the URI Secrets among them are re-attached to their revisions. */
  present: Set<string>;
  warnings: string[];
}

const key = (o: { metadata: { namespace?: string; name?: string } }) =>
  `${o.metadata.namespace ?? ""}/${o.metadata.name}`;
const requirementKey = (r: { kind: string; namespace: string; name: string }) =>
  `${r.kind}/${r.namespace}/${r.name}`;

export async function check(client: KubeClient, contents: BackupContents, flags: Flags): Promise<Checked> {
  const warnings: string[] = [];
  const namespaces = new Set([
    ...contents.namespaces.map((n) => n.metadata.name!),
    ...contents.models.map((m) => m.model.metadata.namespace!),
    ...contents.runtimes.map((r) => r.metadata.namespace!),
  ]);
  // One get each, not a list: restoring into namespaces one may use needs no cluster-wide read.
  const existingNamespaces = new Set<string>();
  for (const ns of namespaces) {
    if (await client.get(builtinKinds.Namespace, { name: ns })) existingNamespaces.add(ns);
  }
  const existingModels = new Map<string, MLModel>();
  for (const ns of namespaces) {
    if (!existingNamespaces.has(ns)) continue;
    for (const m of await listAll<MLModel>(client, mlModelKind, { namespace: ns }))
      existingModels.set(key(m), m);
  }
  const backedUp = new Set(contents.models.map((m) => key(m.model)));
  for (const id of existingModels.keys()) if (!backedUp.has(id)) existingModels.delete(id);
  const clashes = [...existingModels.keys()].sort();
  if (clashes.length && !flags.overwrite) {
    throw new CliError(
      `the cluster already has ${clashes.length} MLModel(s) named as in the backup (${listed(clashes)}): nothing was written; delete them, restore into another cluster, or pass --overwrite to replace their spec and history with the backup's`,
    );
  }
  const runtimesToWrite = new Set<string>();
  const runtimeClashes: string[] = [];
  const runtimes: [ResourceKind, KubeObject][] = [
    ...contents.clusterRuntimes.map((r) => [clusterServingRuntimeKind, r] as [ResourceKind, KubeObject]),
    ...contents.runtimes.map((r) => [servingRuntimeKind, r] as [ResourceKind, KubeObject]),
  ];
  for (const [kind, runtime] of runtimes) {
    const live =
      kind.namespaced && !existingNamespaces.has(runtime.metadata.namespace!)
        ? undefined
        : await client.get(kind, { namespace: runtime.metadata.namespace, name: runtime.metadata.name! });
    const id = `${kind.kind}/${key(runtime)}`;
    if (!live) runtimesToWrite.add(id);
    else if (!sameContent(live, runtime)) {
      if (flags.overwrite) runtimesToWrite.add(id);
      else runtimeClashes.push(`${kind.kind} ${key(runtime).replace(/^\//, "")}`);
    }
  }
  if (runtimeClashes.length) {
    throw new CliError(
      `the cluster already has ${listed(runtimeClashes)} with another spec than the backup's: nothing was written; pass --overwrite to replace them`,
    );
  }
  const { present, missing, exactUris } = await findRequirements(client, contents, existingNamespaces);
  const serving = missing.filter((r) => !r.rollbackOnly);
  for (const r of missing.filter((r) => r.rollbackOnly))
    warnings.push(
      `${describe(r)} does not exist: \`mlmodel rollback ${r.model} --to-revision\` to it will fail until it does`,
    );
  if (serving.length && !flags.allowMissing) {
    throw new CliError(
      `${serving.length} object(s) the restored models need do not exist (a backup holds no Secret): nothing was written; create them first, or pass --allow-missing:\n${serving.map((r) => `  ${describe(r)}`).join("\n")}`,
    );
  }
  for (const r of serving) warnings.push(`${describe(r)} does not exist: the model waits for it`);
  return { existingNamespaces, existingModels, runtimesToWrite, exactUris, present, warnings };
}

function describe(r: Requirement): string {
  return `${r.kind} ${r.namespace}/${r.name} (${r.why} of MLModel ${r.model})`;
}

function listed(items: readonly string[]): string {
  return items.length <= 10
    ? items.join(", ")
    : `${items.slice(0, 10).join(", ")} and ${items.length - 10} more`;
}

const requirementKinds: Record<Requirement["kind"], ResourceKind> = {
  Secret: builtinKinds.Secret,
  ConfigMap: builtinKinds.ConfigMap,
  PersistentVolumeClaim: builtinKinds.PersistentVolumeClaim,
};

/** Which required objects exist; the exact URI of each model whose file has it redacted. */
async function findRequirements(
  client: KubeClient,
  contents: BackupContents,
  existingNamespaces: ReadonlySet<string>,
) {
  const requirements = requirementsOf(contents);
  const present = new Set<string>();
  const missing: Requirement[] = [];
  const secrets = new Map<string, KubeObject & { data?: Record<string, string> }>();
  await inParallel(requirements, 16, async (r) => {
    const found = existingNamespaces.has(r.namespace)
      ? await client.get<KubeObject & { data?: Record<string, string> }>(requirementKinds[r.kind], r)
      : undefined;
    if (!found) missing.push(r);
    else {
      present.add(requirementKey(r));
      if (r.kind === "Secret") secrets.set(requirementKey(r), found);
    }
  });
  const exactUris = new Map<string, string>();
  for (const { model } of contents.models) {
    const secretName = uriSecretOf(model);
    if (!secretName) continue;
    const secret = secrets.get(
      requirementKey({ kind: "Secret", namespace: model.metadata.namespace!, name: secretName }),
    );
    if (!secret) continue;
    const uri = secret.data?.[uriSecretKey];
    if (!uri) {
      throw new CliError(
        `Secret ${model.metadata.namespace}/${secretName} has no key "${uriSecretKey}": MLModel ${model.metadata.name}'s exact model URI must be in it (restore the Secret as it was)`,
      );
    }
    exactUris.set(key(model), Buffer.from(uri, "base64").toString("utf8"));
  }
  missing.sort((a, b) => requirementKey(a).localeCompare(requirementKey(b)));
  return { present, missing, exactUris };
}

function describePlan(contents: BackupContents, checked: Checked): string {
  const missingNs = new Set(
    [
      ...contents.namespaces.map((n) => n.metadata.name!),
      ...contents.models.map((m) => m.model.metadata.namespace!),
    ].filter((n) => !checked.existingNamespaces.has(n)),
  );
  const revisions = contents.models.reduce((n, m) => n + m.revisions.length, 0);
  return [
    "dry run: nothing written. A restore would write:",
    `  ${missingNs.size} namespace(s) missing here${missingNs.size ? `: ${listed([...missingNs].sort())}` : ""}`,
    `  ${checked.runtimesToWrite.size} runtime(s)${checked.runtimesToWrite.size ? `: ${listed([...checked.runtimesToWrite].sort())}` : ""} (the others exist as backed up)`,
    `  ${contents.models.length} MLModel(s) (${checked.existingModels.size} replacing one of the same name), ${revisions} revision(s)`,
  ].join("\n");
}

export interface Restored {
  /** Models restored, and their revisions. */
  models: number;
  revisions: number;
  renumbered: number;
  warnings: string[];
}

export async function restore(
  client: KubeClient,
  contents: BackupContents,
  checked: Checked,
  flags: Flags,
): Promise<Restored> {
  for (const ns of contents.namespaces) {
    if (checked.existingNamespaces.has(ns.metadata.name!)) continue;
    await createOrIgnore(client, builtinKinds.Namespace, ns);
  }
  for (const ns of new Set(contents.models.map((m) => m.model.metadata.namespace!))) {
    if (checked.existingNamespaces.has(ns) || contents.namespaces.some((n) => n.metadata.name === ns))
      continue;
    await createOrIgnore(client, builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns },
    });
  }
  const runtimes: [ResourceKind, KubeObject][] = [
    ...contents.clusterRuntimes.map((r) => [clusterServingRuntimeKind, r] as [ResourceKind, KubeObject]),
    ...contents.runtimes.map((r) => [servingRuntimeKind, r] as [ResourceKind, KubeObject]),
  ];
  for (const [kind, runtime] of runtimes) {
    if (!checked.runtimesToWrite.has(`${kind.kind}/${key(runtime)}`)) continue;
    await client.apply(kind, runtime, { fieldManager: restoreManager, force: true });
  }
  // A model whose exact URI is in a Secret that is missing (--allow-missing) is left out:
  // created with the redacted URI it would download that, as a new revision.
  const skipped = contents.models.filter((m) => uriSecretOf(m.model) && !checked.exactUris.has(key(m.model)));
  const models = contents.models.filter((m) => !skipped.includes(m));
  const uids = new Map<string, string>();
  await inParallel(models, flags.concurrency, async (m) => {
    uids.set(key(m.model), await restoreModel(client, m, checked));
  });
  const settled = await settleNumbers(client, { ...contents, models }, uids);
  return {
    models: models.length,
    revisions: models.reduce((n, m) => n + m.revisions.length, 0),
    renumbered: settled.renumbered,
    warnings: [
      ...skipped.map(
        (m) =>
          `MLModel ${key(m.model)} not restored: its exact model URI is in Secret ${uriSecretOf(m.model)}, which does not exist; create it and restore again`,
      ),
      ...settled.warnings,
    ],
  };
}

async function createOrIgnore(client: KubeClient, kind: ResourceKind, obj: KubeObject): Promise<void> {
  try {
    await client.create(kind, obj, { fieldManager: restoreManager });
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 409)) throw err;
  }
}

/** One model: the MLModel, its revisions owned by it, its URI Secrets re-attached, its status memory. Returns its uid. */
async function restoreModel(client: KubeClient, backup: ModelBackup, checked: Checked): Promise<string> {
  const id = key(backup.model);
  const want = modelToRestore(backup.model, checked.exactUris.get(id));
  const existing = checked.existingModels.get(id);
  const model = existing
    ? await client.replace<MLModel>(
        mlModelKind,
        { ...want, metadata: { ...want.metadata, resourceVersion: existing.metadata.resourceVersion } },
        { fieldManager: restoreManager },
      )
    : await client.create<MLModel>(mlModelKind, want, { fieldManager: restoreManager });
  const owner = controllerOwnerRef(model);
  const namespace = model.metadata.namespace!;
  if (existing) await deleteRevisionsNotInBackup(client, backup, model);
  // Newest first: the spec's revision is the newest, so an operator that sees part of the
  // history sees its revision as the newest and leaves the numbers alone.
  for (const rev of backup.revisions) {
    const written = await writeRevision(client, revisionToRestore(rev, owner));
    const source = recordedSource(rev);
    if (
      !source ||
      !checked.present.has(requirementKey({ kind: "Secret", namespace, name: source.uriSecret }))
    )
      continue;
    // The URI Secret goes with its revision, and the operator knows it for its own by this owner.
    const secretOwner = {
      apiVersion: "apps/v1",
      kind: "ControllerRevision",
      name: written.metadata!.name!,
      uid: written.metadata!.uid!,
      controller: true,
    };
    await client.patch(
      builtinKinds.Secret,
      { namespace, name: source.uriSecret },
      { metadata: { ownerReferences: [secretOwner] } },
      "merge",
    );
  }
  const memory = statusMemory(backup.model.status);
  if (memory) {
    await client.patch(mlModelKind, { namespace, name: model.metadata.name! }, { status: memory }, "merge", {
      subresource: "status",
    });
  }
  return model.metadata.uid!;
}

/**
 * Applies a revision; one the operator recorded meanwhile with other data (data is immutable:
 * an older operator recorded another form of the same spec) is replaced.
 */
async function writeRevision(client: KubeClient, rev: V1ControllerRevision): Promise<V1ControllerRevision> {
  const obj = rev as unknown as KubeObject;
  try {
    return (await client.apply(builtinKinds.ControllerRevision, obj, {
      fieldManager: restoreManager,
      force: true,
    })) as unknown as V1ControllerRevision;
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 422)) throw err;
    await client.delete(builtinKinds.ControllerRevision, {
      namespace: rev.metadata!.namespace!,
      name: rev.metadata!.name!,
    });
    return (await client.create(builtinKinds.ControllerRevision, obj, {
      fieldManager: restoreManager,
    })) as unknown as V1ControllerRevision;
  }
}

async function deleteRevisionsNotInBackup(
  client: KubeClient,
  backup: ModelBackup,
  model: MLModel,
): Promise<void> {
  const live = (
    await listAll(client, builtinKinds.ControllerRevision, {
      namespace: model.metadata.namespace!,
      labelSelector: `${revisionSelector},${labels.model}=${model.metadata.name}`,
    })
  ).filter((r) =>
    r.metadata.ownerReferences?.some((o) => o.uid === model.metadata.uid),
  ) as unknown as V1ControllerRevision[];
  for (const r of revisionsNotInBackup(backup, live)) {
    await client.delete(builtinKinds.ControllerRevision, {
      namespace: model.metadata.namespace!,
      name: r.metadata!.name!,
    });
  }
}

/** How long the operator's view of a restored history may lag behind it (a watch event's trip). */
const settleMs = 2000;
const settleRounds = 5;

/**
 * An operator that reconciled a model before its history was written recorded the spec's
 * revision numbered from what it had seen; it stops renumbering once it sees the whole
 * history. So: wait, re-read, set back what differs from the backup, until a round finds
 * nothing to set back. Returns how many numbers were set back, and what could not be.
 */
async function settleNumbers(
  client: KubeClient,
  contents: BackupContents,
  uids: ReadonlyMap<string, string>,
): Promise<{ renumbered: number; warnings: string[] }> {
  const namespaces = [...new Set(contents.models.map((m) => m.model.metadata.namespace!))];
  let renumbered = 0;
  let live = new Map<string, V1ControllerRevision[]>();
  for (let round = 0; round < settleRounds; round++) {
    await sleep(settleMs);
    live = await liveRevisions(client, namespaces, uids);
    let fixed = 0;
    await inParallel(contents.models, 16, async (m) => {
      const have = live.get(key(m.model)) ?? [];
      const owner = ownerOf(m.model, uids.get(key(m.model))!);
      for (const rev of revisionsToRenumber(m, have)) {
        await writeRevision(client, revisionToRestore(rev, owner));
        fixed++;
      }
    });
    renumbered += fixed;
    if (fixed === 0) break;
  }
  const warnings: string[] = [];
  for (const m of contents.models) {
    const extra = revisionsNotInBackup(m, live.get(key(m.model)) ?? []);
    if (extra.length) {
      warnings.push(
        `MLModel ${key(m.model)} has revision(s) the backup does not (${extra.map((r) => `${r.revision} ${revisionHash(r)}`).join(", ")}): the operator here renders the spec differently (another version or configuration), so it serves a new revision`,
      );
    }
  }
  return { renumbered, warnings };
}

function ownerOf(model: MLModel, uid: string) {
  return controllerOwnerRef({ ...model, metadata: { ...model.metadata, uid } });
}

async function liveRevisions(
  client: KubeClient,
  namespaces: readonly string[],
  uids: ReadonlyMap<string, string>,
): Promise<Map<string, V1ControllerRevision[]>> {
  const byModel = new Map<string, V1ControllerRevision[]>();
  for (const namespace of namespaces) {
    const items = await listAll(client, builtinKinds.ControllerRevision, {
      namespace,
      labelSelector: revisionSelector,
    });
    for (const r of items as unknown as V1ControllerRevision[]) {
      const id = `${namespace}/${r.metadata?.labels?.[labels.model]}`;
      if (!r.metadata?.ownerReferences?.some((o) => o.controller && o.uid === uids.get(id))) continue;
      byModel.set(id, [...(byModel.get(id) ?? []), r]);
    }
  }
  return byModel;
}

/** Runs `work` on every item, at most `limit` at once; the first failure fails it all. */
async function inParallel<T>(
  items: readonly T[],
  limit: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
