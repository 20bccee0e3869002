/**
 * The children of a set of downloaded models in storage mode Claim, as plain JSON: compared
 * byte for byte with golden/claim-mode.json, which the operator before the node cache wrote
 * (an operator upgrade must not roll a model a claim serves). Runs against any version of the
 * operator's sources: it passes the storage context as an extra argument older ones ignore.
 */
import type { MLModelSpec } from "../../../src/api/mlmodel.ts";
import {
  desiredDeployment,
  desiredDownloadJob,
  desiredStorage,
  servingPodTemplate,
} from "../../../src/operator/desired.ts";
import { planModel } from "../../../src/operator/plan.ts";
import { model, owner, tf } from "./fixtures.ts";

export const claimModeSpecs: Record<string, MLModelSpec> = {
  plain: { model: { uri: "s3://bucket/resnet/", format: "tensorflow" } },
  pinned: {
    model: { uri: "https://models.example.com/resnet.tar.gz", format: "tensorflow", sha256: "a".repeat(64) },
    replicas: 3,
  },
  versioned: { model: { uri: "gs://bucket/resnet", format: "tensorflow", version: "2" } },
  credentials: {
    model: { uri: "s3://bucket/resnet/", format: "tensorflow", credentialsSecretRef: { name: "aws" } },
  },
  signed: { model: { uri: "https://store.example.com/m.tar.gz?X-Amz-Signature=abc", format: "tensorflow" } },
  placed: {
    model: { uri: "s3://bucket/resnet/", format: "tensorflow" },
    placement: { nodeSelector: { pool: "gpu" } },
    storage: { size: "50Gi", storageClassName: "fast" },
  },
  shared: {
    model: { uri: "s3://bucket/resnet/", format: "tensorflow" },
    storage: { accessMode: "ReadWriteMany" },
    replicas: 2,
  },
};

const config = { downloaderImage: "example.com/mlmodel:1" };

export function claimModeObjects(storage: object = {}): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, spec] of Object.entries(claimModeSpecs)) {
    const plan = (planModel as (...args: unknown[]) => ReturnType<typeof planModel>)(
      model(spec),
      tf,
      undefined,
      storage,
    );
    out[name] = {
      revision: servingPodTemplate(plan).revision,
      claim: desiredStorage(plan, owner) ?? null,
      job: desiredDownloadJob(plan, owner, config) ?? null,
      deployment: desiredDeployment(plan, owner),
    };
  }
  return out;
}

if (import.meta.main) process.stdout.write(`${JSON.stringify(claimModeObjects(), null, 2)}\n`);
