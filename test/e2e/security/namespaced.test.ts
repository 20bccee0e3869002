/**
 * On a control plane of this file's own (it installs the operator's RBAC in another shape than
 * the shared cluster's, and toggles an admission policy):
 * - a namespaced install: the operator, as a real process under its ServiceAccount token, serves
 *   a model in the one namespace it watches, holding no right on namespaced kinds elsewhere;
 * - the cost of the references policy: server-side applies of MLModels that name a Secret and a
 *   ServiceAccount, by a user who may use both, with the policy bound and without.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { AuthorizationV1Api, type KubeConfig } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import { install } from "../../../src/install/install.ts";
import { defaultOperatorNamespace } from "../../../src/install/manifests.ts";
import { referencePolicy } from "../../../src/install/policies.ts";
import { operatorName } from "../../../src/operator/names.ts";
import {
  ApiError,
  builtinKinds,
  KubeClient,
  type KubeObject,
  type ResourceKind,
} from "../../../src/runtime/index.ts";
import { OperatorProcess, waitReady } from "../../chaos/operator-process.ts";
import { type PrivateCluster, startPrivateCluster, waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { serviceAccountKubeConfig } from "../install/support.ts";
import { waitForPhase } from "../operator/helpers.ts";

const watched = "team-a";
const unwatched = "team-b";
const policyBindingKind: ResourceKind = {
  group: "admissionregistration.k8s.io",
  version: "v1",
  kind: "ValidatingAdmissionPolicyBinding",
  plural: "validatingadmissionpolicybindings",
  namespaced: false,
};
const referencesBinding = `${operatorName}-${referencePolicy.suffix}`;

let cluster: PrivateCluster;
let kc: KubeConfig;
let admin: KubeClient;
let dir: string;

before(async () => {
  cluster = await startPrivateCluster("namespaced");
  kc = cluster.kubeConfig();
  admin = KubeClient.fromKubeConfig(kc);
  dir = scratchDir("namespaced");
  for (const name of [watched, unwatched])
    await admin.create(builtinKinds.Namespace, { apiVersion: "v1", kind: "Namespace", metadata: { name } });
  await install(admin, { watchNamespaces: [watched] });
});

after(async () => {
  await cluster?.stop();
});

const model = (namespace: string, name: string, spec: Record<string, unknown>): KubeObject => ({
  apiVersion: "serving.mlmodel.dev/v1alpha1",
  kind: "MLModel",
  metadata: { name, namespace },
  spec,
});

describe("a namespaced install", () => {
  let op: OperatorProcess;

  before(async () => {
    const opKubeconfig = join(dir, "operator.kubeconfig");
    await serviceAccountKubeConfig(kc, defaultOperatorNamespace, operatorName, opKubeconfig);
    op = await OperatorProcess.start({
      kubeconfig: opKubeconfig,
      namespace: watched,
      logFile: join(dir, "operator.log"),
    });
    await waitReady(op);
  });

  after(async () => {
    await op?.kill("SIGTERM");
  });

  it("serves a model in the namespace it watches, with a Role there and no cluster-wide namespaced right", async () => {
    await admin.apply(
      mlModelKind,
      model(watched, "custom", {
        image: "registry.example.com/team/server:1",
        model: { path: "/m" },
        replicas: 1,
      }),
      { fieldManager: "e2e", force: true },
    );
    await waitForPhase(admin, watched, "custom", "Ready");
    const authz = kc.makeApiClient(AuthorizationV1Api);
    // What the API server would let the operator's ServiceAccount do.
    const can = async (verb: string, resource: string, group: string, namespace?: string) => {
      const [res, subresource] = resource.split("/");
      const review = await authz.createSubjectAccessReview({
        body: {
          spec: {
            user: `system:serviceaccount:${defaultOperatorNamespace}:${operatorName}`,
            groups: ["system:serviceaccounts", "system:authenticated"],
            resourceAttributes: {
              verb,
              resource: res!,
              group,
              ...(subresource ? { subresource } : {}),
              ...(namespace ? { namespace } : {}),
            },
          },
        },
      });
      return review.status?.allowed === true;
    };
    const checks: [string, string, string][] = [
      ["list", "secrets", ""],
      ["watch", "pods", ""],
      ["create", "deployments", "apps"],
      ["create", "jobs", "batch"],
      ["patch", "mlmodels/status", "serving.mlmodel.dev"],
    ];
    const rights = (namespace?: string) =>
      Promise.all(checks.map(([verb, resource, group]) => can(verb, resource, group, namespace)));
    assert.deepEqual(await rights(watched), [true, true, true, true, true], "its rights where it works");
    assert.deepEqual(await rights(unwatched), [false, false, false, false, false], "another namespace");
    assert.deepEqual(await rights(), [false, false, false, false, false], "all namespaces");
    assert.equal(await can("list", "clusterservingruntimes", "serving.mlmodel.dev"), true);
    assert.doesNotMatch(
      readFileSync(join(dir, "operator.log"), "utf8"),
      /forbidden/i,
      "the operator hit a permission it does not have",
    );
  });
});

describe("the references policy's cost", () => {
  // Two namespaces alike but for the policy, which is bound to one of them: applies alternate
  // between them one by one, so the machine's load weighs on both sides alike.
  const checked = "cost-checked";
  const unchecked = "cost-unchecked";
  const spec = (withReferences: boolean) => ({
    model: {
      uri: "s3://bucket/m/",
      format: "tensorflow",
      ...(withReferences ? { credentialsSecretRef: { name: "creds" } } : {}),
    },
    storage: { size: "1Gi" },
    ...(withReferences ? { serviceAccountName: "identity" } : {}),
  });
  const rbac = "rbac.authorization.k8s.io";
  const models = {
    apiGroups: ["serving.mlmodel.dev"],
    resources: ["mlmodels"],
    verbs: ["get", "create", "patch"],
  };
  const authorRules = [
    models,
    { apiGroups: [""], resources: ["secrets"], resourceNames: ["creds"], verbs: ["get"] },
    { apiGroups: [""], resources: ["pods"], verbs: ["create"] },
  ];

  /** A user of `ns` with `rules`, as a client holding its token. */
  async function user(ns: string, name: string, rules: object[]): Promise<KubeClient> {
    const meta = { name, namespace: ns };
    await admin.create(builtinKinds.ServiceAccount, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: meta,
    });
    await admin.create(builtinKinds.Role, {
      apiVersion: `${rbac}/v1`,
      kind: "Role",
      metadata: meta,
      rules,
    } as KubeObject);
    await admin.create(builtinKinds.RoleBinding, {
      apiVersion: `${rbac}/v1`,
      kind: "RoleBinding",
      metadata: meta,
      roleRef: { apiGroup: rbac, kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name, namespace: ns }],
    } as KubeObject);
    return KubeClient.fromKubeConfig(
      await serviceAccountKubeConfig(kc, ns, name, join(dir, `${ns}-${name}.kubeconfig`)),
    );
  }

  /** A namespace with the Secret and ServiceAccount the models name, and an author who may use both. */
  async function namespaceWithAuthor(ns: string, labels: Record<string, string>): Promise<KubeClient> {
    await admin.create(builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns, labels },
    });
    await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "creds", namespace: ns },
      stringData: { K: "v" },
    } as KubeObject);
    await admin.create(builtinKinds.ServiceAccount, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: "identity", namespace: ns },
    });
    return user(ns, "author", authorRules);
  }

  /** Milliseconds of one server-side apply of a new MLModel naming a Secret and a ServiceAccount. */
  async function timedApply(author: KubeClient, ns: string, name: string): Promise<number> {
    const started = performance.now();
    await author.apply(mlModelKind, model(ns, name, spec(true)), { fieldManager: "cost", force: true });
    return performance.now() - started;
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

  it("costs little: median apply latency where it applies over where it does not, applies interleaved", async (t) => {
    const authors: Record<string, KubeClient> = {
      [checked]: await namespaceWithAuthor(checked, { "cost-test": "checked" }),
      [unchecked]: await namespaceWithAuthor(unchecked, {}),
    };
    const strangers: Record<string, KubeClient> = {
      [checked]: await user(checked, "stranger", [models]),
      [unchecked]: await user(unchecked, "stranger", [models]),
    };
    await admin.apply(
      policyBindingKind,
      {
        apiVersion: "admissionregistration.k8s.io/v1",
        kind: "ValidatingAdmissionPolicyBinding",
        metadata: { name: referencesBinding },
        spec: {
          policyName: referencesBinding,
          validationActions: ["Deny"],
          matchResources: { namespaceSelector: { matchLabels: { "cost-test": "checked" } } },
        },
      } as KubeObject,
      { fieldManager: "cost", force: true },
    );
    // Whether the policy holds in `ns`: a user who may not read the Secret is refused a model naming it.
    const enforced = async (ns: string) => {
      try {
        await strangers[ns]!.apply(mlModelKind, model(ns, "probe", spec(true)), {
          fieldManager: "probe",
          force: true,
        });
        return false;
      } catch (err) {
        if (err instanceof ApiError && err.code === 403) return true;
        throw err;
      }
    };
    await waitFor(
      "the policy to hold in one namespace only",
      async () => (await enforced(checked)) && !(await enforced(unchecked)),
    );
    const pairs = 300;
    const times: Record<string, number[]> = { [checked]: [], [unchecked]: [] };
    // Warm-up: connections, caches, the first authorizer decisions.
    for (let i = 0; i < 20; i++)
      for (const ns of [checked, unchecked]) await timedApply(authors[ns]!, ns, `warm-${i}`);
    for (let i = 0; i < pairs; i++) {
      // Which goes first alternates too.
      for (const ns of i % 2 ? [checked, unchecked] : [unchecked, checked])
        times[ns]!.push(await timedApply(authors[ns]!, ns, `m-${i}`));
    }
    const ratio = median(times[checked]!) / median(times[unchecked]!);
    t.diagnostic(
      `references policy: median server-side apply ${median(times[checked]!).toFixed(2)} ms where it applies, ${median(times[unchecked]!).toFixed(2)} ms where it does not (${pairs} interleaved pairs): ratio ${ratio.toFixed(3)}`,
    );
    assert.equal(times[checked]!.length, pairs);
    assert.ok(ratio < 1.5, `the policy made applies ${ratio.toFixed(2)}x slower`);
  });
});
