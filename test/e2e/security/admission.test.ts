/**
 * The install's admission policies on the real API server, with real users (ServiceAccount
 * tokens, never the admin's certificate):
 * - an MLModel may name only the Secret, ConfigMap and ServiceAccount its author may use: a user
 *   who may create MLModels but not read the Secret (or create pods) is refused, the message
 *   naming the field and the missing permission; a user who may is admitted;
 * - the operator's token can write only its download identities (exact names and rules) and
 *   Jobs and Deployments with pinned ServiceAccounts, though its RBAC would let it write more.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { KubeConfig } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import { downloaderRoleRule } from "../../../src/downloader/contract.ts";
import { install } from "../../../src/install/install.ts";
import { childNames, labels } from "../../../src/operator/names.ts";
import { ApiError, builtinKinds, KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { operatorKubeconfig } from "../../chaos/operator-process.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { serviceAccountKubeConfig } from "../install/support.ts";
import { adminClient } from "../operator/helpers.ts";

/** The HTTP code and message of a write: 201-ish as 200, an API error as its code. */
async function outcome(write: Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await write;
    return { code: 200, message: "" };
  } catch (err) {
    if (err instanceof ApiError) return { code: err.code, message: err.message };
    throw err;
  }
}

const rbac = (kind: "Role" | "RoleBinding", name: string, namespace: string, body: object): KubeObject =>
  ({
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind,
    metadata: { name, namespace },
    ...body,
  }) as KubeObject;

/** A user: a ServiceAccount of `ns` granted `rules` there, and a client holding its token. */
async function userWith(
  admin: KubeClient,
  ns: string,
  name: string,
  rules: object[],
  dir: string,
): Promise<KubeClient> {
  await admin.create(builtinKinds.ServiceAccount, {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: { name, namespace: ns },
  });
  await admin.create(builtinKinds.Role, rbac("Role", name, ns, { rules }));
  await admin.create(
    builtinKinds.RoleBinding,
    rbac("RoleBinding", name, ns, {
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name, namespace: ns }],
    }),
  );
  const kc = await serviceAccountKubeConfig(kubeConfig(), ns, name, `${dir}/${name}.kubeconfig`);
  return KubeClient.fromKubeConfig(kc);
}

const writeModels = {
  apiGroups: ["serving.mlmodel.dev"],
  resources: ["mlmodels"],
  verbs: ["get", "create", "update", "patch"],
};

describe("an MLModel may name only what its author may use", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  /** May create MLModels, read Secret team-creds and ConfigMap team-config, and create pods. */
  let author: KubeClient;
  /** May create MLModels, and nothing else. */
  let modeler: KubeClient;

  const model = (name: string, spec: Record<string, unknown>): KubeObject =>
    ({
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name, namespace: ns.name },
      spec: { storage: { size: "1Gi" }, ...spec },
    }) as KubeObject;
  const s3 = (extra: Record<string, unknown> = {}) => ({
    uri: "s3://bucket/models/resnet/",
    format: "tensorflow",
    ...extra,
  });
  const create = (as: KubeClient, obj: KubeObject) => outcome(as.create(mlModelKind, obj));

  before(async () => {
    ns = await createNamespace("e2e-admission");
    admin = await adminClient();
    await install(admin);
    const dir = scratchDir("admission");
    await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "team-creds", namespace: ns.name },
      stringData: { AWS_ACCESS_KEY_ID: "k", AWS_SECRET_ACCESS_KEY: "s" },
    } as KubeObject);
    await admin.create(builtinKinds.ConfigMap, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "team-config", namespace: ns.name },
      data: { "models.config": "model_config_list {}" },
    } as KubeObject);
    author = await userWith(
      admin,
      ns.name,
      "author",
      [
        writeModels,
        { apiGroups: [""], resources: ["secrets"], resourceNames: ["team-creds"], verbs: ["get"] },
        { apiGroups: [""], resources: ["configmaps"], resourceNames: ["team-config"], verbs: ["get"] },
        { apiGroups: [""], resources: ["pods"], verbs: ["create"] },
      ],
      dir,
    );
    modeler = await userWith(admin, ns.name, "modeler", [writeModels], dir);
    // Policies take effect a moment after they are created: wait for the first refusal.
    await waitFor("the references policy to refuse", async () => {
      const r = await create(
        modeler,
        model("probe", { model: s3({ credentialsSecretRef: { name: "team-creds" } }) }),
      );
      if (r.code === 200) await admin.delete(mlModelKind, { namespace: ns.name, name: "probe" });
      return r.code === 403;
    });
  });

  after(async () => {
    await ns?.delete();
  });

  it("refuses a credentials Secret its author may not read, naming the field and the permission", async () => {
    const refused = await create(
      modeler,
      model("borrowed-creds", { model: s3({ credentialsSecretRef: { name: "team-creds" } }) }),
    );
    assert.equal(refused.code, 403, refused.message);
    assert.match(refused.message, /spec\.model\.credentialsSecretRef\.name/);
    assert.match(
      refused.message,
      new RegExp(
        `system:serviceaccount:${ns.name}:modeler may not get Secret team-creds in namespace ${ns.name}`,
      ),
    );
    const admitted = await create(
      author,
      model("own-creds", { model: s3({ credentialsSecretRef: { name: "team-creds" } }) }),
    );
    assert.equal(admitted.code, 200, admitted.message);
    // The same user may create a model that names nothing of anyone's.
    const plain = await create(modeler, model("plain", { model: s3() }));
    assert.equal(plain.code, 200, plain.message);
  });

  it("refuses a ServiceAccount to a user who may not create pods", async () => {
    await admin.create(builtinKinds.ServiceAccount, {
      apiVersion: "v1",
      kind: "ServiceAccount",
      metadata: { name: "workload-identity", namespace: ns.name },
    });
    const spec = { model: s3(), serviceAccountName: "workload-identity" };
    const refused = await create(modeler, model("borrowed-account", spec));
    assert.equal(refused.code, 403, refused.message);
    assert.match(
      refused.message,
      /spec\.serviceAccountName: .*modeler may not create pods \(to run them as ServiceAccount workload-identity\)/,
    );
    const admitted = await create(author, model("own-account", spec));
    assert.equal(admitted.code, 200, admitted.message);
    // Not even its author may run a model's serving pods as that model's download identity.
    const asDownloader = await create(
      author,
      model("mine", { model: s3(), serviceAccountName: childNames.downloader("mine") }),
    );
    assert.equal(asDownloader.code, 403, asDownloader.message);
    assert.match(
      asDownloader.message,
      /spec\.serviceAccountName: mine-downloader is this model's download identity/,
    );
  });

  it("refuses a ConfigMap its author may not read", async () => {
    const spec = {
      model: { format: "tensorflow", configMapRef: { name: "team-config", key: "models.config" } },
    };
    const refused = await create(modeler, model("borrowed-config", spec));
    assert.equal(refused.code, 403, refused.message);
    assert.match(refused.message, /spec\.model\.configMapRef\.name: .*may not get ConfigMap team-config/);
    assert.equal((await create(author, model("own-config", spec))).code, 200);
  });

  it("checks every update too: a user who may not read the Secret cannot repoint a model that uses it", async () => {
    const own = await author.get<KubeObject & { spec: { model: Record<string, unknown> } }>(mlModelKind, {
      namespace: ns.name,
      name: "own-creds",
    });
    assert.ok(own);
    // Pointing the download, and with it the Secret's keys, at a server of the modeler's choice.
    own.spec.model = { ...own.spec.model, uri: "https://attacker.example.com/model.bin" };
    const refused = await outcome(modeler.replace(mlModelKind, own));
    assert.equal(refused.code, 403, refused.message);
    assert.match(refused.message, /may not get Secret team-creds/);
    const byAuthor = await outcome(author.replace(mlModelKind, own));
    assert.equal(byAuthor.code, 200, byAuthor.message);
  });
});

describe("the operator's token writes only what its reconciles write", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let asOperator: KubeClient;
  const model = "pinned";
  const identity = childNames.downloader(model);
  const ours = () => ({ [labels.model]: model });

  before(async () => {
    ns = await createNamespace("e2e-pinned");
    admin = await adminClient();
    await install(admin);
    const kc = new KubeConfig();
    kc.loadFromFile(await operatorKubeconfig(admin, kubeConfig(), scratchDir("pinned")));
    asOperator = KubeClient.fromKubeConfig(kc);
  });

  after(async () => {
    await ns?.delete();
  });

  const role = (name: string, rules: object[], lbls = ours()) =>
    ({
      ...rbac("Role", name, ns.name, { rules }),
      metadata: { name, namespace: ns.name, labels: lbls },
    }) as KubeObject;

  it("a Role: only its model's download rule, under its download identity's name", async () => {
    const refusal = await waitFor("the identities policy to refuse", async () => {
      // Within the operator's own rights, so RBAC's escalation check lets it through.
      const r = await outcome(
        asOperator.create(
          builtinKinds.Role,
          role(identity, [{ apiGroups: [""], resources: ["secrets"], verbs: ["list", "watch"] }]),
        ),
      );
      if (r.code === 200) await admin.delete(builtinKinds.Role, { namespace: ns.name, name: identity });
      return r.code === 403 ? r : undefined;
    });
    assert.match(refusal.message, /may hold only its model's download rule/);
    const misnamed = await outcome(
      asOperator.create(builtinKinds.Role, role("reader", [downloaderRoleRule(model)])),
    );
    assert.equal(misnamed.code, 403);
    assert.match(misnamed.message, /named <model>-downloader/);
    const otherModel = await outcome(
      asOperator.create(builtinKinds.Role, role(identity, [downloaderRoleRule("other")])),
    );
    assert.equal(otherModel.code, 403, "a rule for another model's status");
    const exact = await outcome(
      asOperator.create(builtinKinds.Role, role(identity, [downloaderRoleRule(model)])),
    );
    assert.equal(exact.code, 200, exact.message);
  });

  it("a RoleBinding: only that Role to that ServiceAccount", async () => {
    const binding = (roleRef: object, subject: object) =>
      ({
        ...rbac("RoleBinding", identity, ns.name, { roleRef, subjects: [subject] }),
        metadata: { name: identity, namespace: ns.name, labels: ours() },
      }) as KubeObject;
    const roleRef = { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: identity };
    const toDefault = await outcome(
      asOperator.create(
        builtinKinds.RoleBinding,
        binding(roleRef, { kind: "ServiceAccount", name: "default", namespace: ns.name }),
      ),
    );
    assert.equal(toDefault.code, 403, toDefault.message);
    assert.match(toDefault.message, /may bind only its model's download Role/);
    const exact = await outcome(
      asOperator.create(
        builtinKinds.RoleBinding,
        binding(roleRef, { kind: "ServiceAccount", name: identity, namespace: ns.name }),
      ),
    );
    assert.equal(exact.code, 200, exact.message);
  });

  it("a ServiceAccount: its download identity's, mounting no token by default", async () => {
    const account = (name: string, extra: object) =>
      ({
        apiVersion: "v1",
        kind: "ServiceAccount",
        metadata: { name, namespace: ns.name, labels: ours() },
        ...extra,
      }) as KubeObject;
    const mounting = await outcome(asOperator.create(builtinKinds.ServiceAccount, account(identity, {})));
    assert.equal(mounting.code, 403, mounting.message);
    assert.match(mounting.message, /automountServiceAccountToken: false/);
    const other = await outcome(
      asOperator.create(
        builtinKinds.ServiceAccount,
        account("helper", { automountServiceAccountToken: false }),
      ),
    );
    assert.equal(other.code, 403, other.message);
    const exact = await outcome(
      asOperator.create(
        builtinKinds.ServiceAccount,
        account(identity, { automountServiceAccountToken: false }),
      ),
    );
    assert.equal(exact.code, 200, exact.message);
  });

  it("a Job runs as its model's download identity; a Deployment mounts no token", async () => {
    const podSpec = (extra: object) => ({
      restartPolicy: "Never",
      containers: [{ name: "c", image: "registry.example.com/x:1" }],
      ...extra,
    });
    const job = (name: string, spec: object) =>
      ({
        apiVersion: "batch/v1",
        kind: "Job",
        metadata: { name, namespace: ns.name, labels: ours() },
        spec: { template: { spec: podSpec(spec) } },
      }) as KubeObject;
    const asDefault = await outcome(asOperator.create(builtinKinds.Job, job("as-default", {})));
    assert.equal(asDefault.code, 403, asDefault.message);
    assert.match(asDefault.message, /must run as its model's download ServiceAccount/);
    // The prune Job: the default account, mounting no token.
    const noToken = await outcome(
      asOperator.create(builtinKinds.Job, job("prune-like", { automountServiceAccountToken: false })),
    );
    assert.equal(noToken.code, 200, noToken.message);
    const asIdentity = await outcome(
      asOperator.create(builtinKinds.Job, job("as-identity", { serviceAccountName: identity })),
    );
    assert.equal(asIdentity.code, 200, asIdentity.message);

    const deployment = (name: string, spec: object) =>
      ({
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: { name, namespace: ns.name, labels: ours() },
        spec: {
          replicas: 0,
          selector: { matchLabels: ours() },
          template: { metadata: { labels: ours() }, spec: { ...podSpec(spec), restartPolicy: "Always" } },
        },
      }) as KubeObject;
    const mounting = await outcome(asOperator.create(builtinKinds.Deployment, deployment("mounting", {})));
    assert.equal(mounting.code, 403, mounting.message);
    assert.match(mounting.message, /must mount no ServiceAccount token/);
    const asDownloader = await outcome(
      asOperator.create(
        builtinKinds.Deployment,
        deployment("as-downloader", { automountServiceAccountToken: false, serviceAccountName: identity }),
      ),
    );
    assert.equal(asDownloader.code, 403, asDownloader.message);
    const serving = await outcome(
      asOperator.create(
        builtinKinds.Deployment,
        deployment("serving", { automountServiceAccountToken: false }),
      ),
    );
    assert.equal(serving.code, 200, serving.message);
    // The policies hold the operator only: an admin still writes what it likes.
    assert.equal(
      (await outcome(admin.create(builtinKinds.Deployment, deployment("by-admin", {})))).code,
      200,
    );
  });
});
