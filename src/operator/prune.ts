/**
 * Pruning old model versions from model storage. Each model content is downloaded into its
 * own directory <mountPath>/<contentHash>; once the model is Ready, a small Job (the
 * downloader image, its Node) removes every content directory that no kept revision uses.
 * The keep list is the content of every ControllerRevision still in history plus the served
 * one, so what is served, what was last ready and what a rollback may ask for all stay. The
 * Job's name hashes the keep list: a new list (a new revision, a pruned revision) gives one
 * new Job, and an unchanged one none.
 */
import type { V1ControllerRevision, V1Job } from "@kubernetes/client-node";
import type { OwnerReference } from "../runtime/index.ts";
import { containerSecurity, podSecurity } from "./desired.ts";
import { childLabels, shortHash } from "./names.ts";
import { contentHash, defaults, type OperatorConfig, type ServingPlan } from "./plan.ts";
import { recordedSource, revisionSpec } from "./revisions.ts";

/**
 * Deletes the content directories in argv[1] not named in argv[2..]. Only names shaped like a
 * content hash are touched (never a partial download or anything else on the volume), and
 * symbolic links are never followed (rmSync removes the link itself).
 */
export const pruneScript = `
const fs = require("node:fs");
const path = require("node:path");
const [base, ...keep] = process.argv.slice(1);
const kept = new Set(keep);
let entries = [];
try { entries = fs.readdirSync(base, { withFileTypes: true }); } catch (e) { if (e.code !== "ENOENT") throw e; }
for (const e of entries) {
  if (!/^[0-9a-f]{10}$/.test(e.name) || kept.has(e.name)) continue;
  fs.rmSync(path.join(base, e.name), { recursive: true, force: true });
  console.log("removed " + e.name);
}
`.trim();

/** The content a revision downloads: recorded beside a redacted URI, else hashed from its spec. */
function revisionContent(rev: V1ControllerRevision): string | undefined {
  const recorded = recordedSource(rev)?.content;
  if (recorded) return recorded;
  const spec = revisionSpec(rev);
  const uri = spec?.model?.uri;
  if (!uri || uri.startsWith("pvc://")) return undefined;
  return contentHash(spec);
}

/** Content directories to keep: the served plans' and every kept revision's, sorted. */
export function contentToKeep(
  served: readonly Pick<ServingPlan, "source">[],
  revisions: readonly V1ControllerRevision[],
): string[] {
  const keep = new Set<string>();
  for (const hash of [
    ...served.map((plan) => (plan.source.type === "download" ? plan.source.content : undefined)),
    ...revisions.map(revisionContent),
  ]) {
    if (hash) keep.add(hash);
  }
  return [...keep].sort();
}

export function pruneJobName(model: string, keep: readonly string[]): string {
  return `${model}-prune-${shortHash(keep)}`;
}

/** The prune Job for a downloaded model, or undefined when nothing is downloaded. */
export function desiredPruneJob(
  plan: ServingPlan,
  owner: OwnerReference,
  config: OperatorConfig,
  keep: readonly string[],
): V1Job | undefined {
  // A NodeCache model has no claim to prune: its agents evict by their budget.
  if (plan.source.type !== "download" || plan.source.nodeCache) return undefined;
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: {
      name: pruneJobName(plan.name, keep),
      namespace: plan.namespace,
      labels: childLabels(plan.name, "prune"),
      ownerReferences: [owner],
    },
    spec: {
      backoffLimit: 2,
      template: {
        metadata: { labels: childLabels(plan.name, "prune") },
        spec: {
          restartPolicy: "Never",
          automountServiceAccountToken: false,
          securityContext: podSecurity(defaults.runAsUser),
          containers: [
            {
              name: "prune",
              image: config.downloaderImage,
              command: ["node", "-e", pruneScript, plan.mountPath, ...keep],
              securityContext: { ...containerSecurity, readOnlyRootFilesystem: true },
              volumeMounts: [{ name: "model", mountPath: plan.mountPath }],
            },
          ],
          volumes: [{ name: "model", persistentVolumeClaim: { claimName: plan.source.claimName } }],
        },
      },
    },
  };
}
