/**
 * Security checks on the shared control plane, with the operator as a real process under its
 * own ServiceAccount:
 * - generated pods (serving and download) are admitted in a namespace enforcing the
 *   `restricted` Pod Security level (and that enforcement is real: a privileged pod is refused);
 * - a canary Secret value never shows in the operator's logs (debug level), Events or status;
 * - the operator has no permission beyond its generated roles (SubjectAccessReviews).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { AuthorizationV1Api, CoreV1Api, KubeConfig, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import { downloaderRoleRule } from "../../../src/downloader/contract.ts";
import { install } from "../../../src/install/install.ts";
import { defaultOperatorNamespace } from "../../../src/install/manifests.ts";
import { childNames, operatorName } from "../../../src/operator/names.ts";
import { ApiError, builtinKinds, KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import {
  OperatorProcess,
  operatorKubeconfig,
  operatorUser,
  waitReady,
} from "../../chaos/operator-process.ts";
import { createNamespace, kubeConfig, type TestNamespace } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { adminClient, isReady, podsOf, provideVolume, waitForPhase } from "../operator/helpers.ts";

const canary = `canary-${crypto.randomUUID()}`;
const canaryForms = [canary, Buffer.from(canary).toString("base64")];

describe("security", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let op: OperatorProcess;
  let logFile: string;
  let volume: string;
  let opKubeconfig: string;

  before(async () => {
    ns = await createNamespace("e2e-security", { podSecurity: "restricted" });
    admin = await adminClient();
    await install(admin);
    const dir = scratchDir("security");
    logFile = join(dir, "operator.log");
    opKubeconfig = await operatorKubeconfig(admin, kubeConfig(), dir);
    op = await OperatorProcess.start({
      kubeconfig: opKubeconfig,
      namespace: ns.name,
      logFile,
      logLevel: "debug",
    });
    await waitReady(op);
    volume = await provideVolume(admin, ns.name, "secure-model");
    await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "canary-creds", namespace: ns.name },
      stringData: { AWS_ACCESS_KEY_ID: canary, AWS_SECRET_ACCESS_KEY: canary },
    } as KubeObject);
    const model = (name: string, spec: Record<string, unknown>): KubeObject => ({
      apiVersion: "serving.mlmodel.dev/v1alpha1",
      kind: "MLModel",
      metadata: { name, namespace: ns.name },
      spec,
    });
    await admin.apply(
      mlModelKind,
      model("secure", {
        model: {
          uri: "s3://bucket/models/secure/",
          format: "tensorflow",
          credentialsSecretRef: { name: "canary-creds" },
        },
        storage: { size: "1Gi" },
        replicas: 1,
      }),
      { fieldManager: "e2e", force: true },
    );
    await admin.apply(
      mlModelKind,
      model("custom", { image: "registry.example.com/team/server:1", model: { path: "/m" }, replicas: 2 }),
      { fieldManager: "e2e", force: true },
    );
    await waitForPhase(admin, ns.name, "secure", "Ready");
    await waitForPhase(admin, ns.name, "custom", "Ready");
  });

  after(async () => {
    await op?.kill("SIGTERM");
    await ns?.delete();
    if (volume) await admin.delete(builtinKinds.PersistentVolume, { name: volume }).catch(() => {});
  });

  it("serving and download pods run in a namespace that enforces the restricted Pod Security level", async () => {
    const core = kubeConfig().makeApiClient(CoreV1Api);
    const privileged = core.createNamespacedPod({
      namespace: ns.name,
      dryRun: "All",
      body: {
        metadata: { name: "privileged" },
        spec: { containers: [{ name: "c", image: "busybox", securityContext: { privileged: true } }] },
      },
    });
    await assert.rejects(privileged, /restricted|PodSecurity|forbidden/i, "enforcement is real");
    assert.equal((await podsOf(admin, ns.name, "custom")).filter(isReady).length, 2);
    assert.equal((await podsOf(admin, ns.name, "secure")).filter(isReady).length, 1);
    const jobPods = (
      await admin.list(builtinKinds.Pod, {
        namespace: ns.name,
        labelSelector: "app.kubernetes.io/component=download",
      })
    ).items;
    assert.ok(jobPods.length >= 1, "the download Job's pod was admitted");
    // Only the download pod mounts a token, of its own account (may patch its model's status).
    for (const p of jobPods) {
      const spec = (p as { spec?: { serviceAccountName?: string; automountServiceAccountToken?: boolean } })
        .spec;
      assert.equal(spec?.serviceAccountName, childNames.downloader("secure"));
      assert.equal(spec?.automountServiceAccountToken, true);
    }
    for (const p of [
      ...(await podsOf(admin, ns.name, "custom")),
      ...(await podsOf(admin, ns.name, "secure")),
    ])
      assert.equal(
        (p as { spec?: { automountServiceAccountToken?: boolean } }).spec?.automountServiceAccountToken,
        false,
      );
    const events = await core.listNamespacedEvent({ namespace: ns.name });
    const refused = events.items.filter((e) => e.reason === "FailedCreate");
    assert.deepEqual(
      refused.map((e) => e.message),
      [],
      "no controller was refused a pod",
    );
  });

  it("the canary Secret value never appears in logs, Events, status or children", async () => {
    const logs = readFileSync(logFile, "utf8");
    assert.ok(logs.split("\n").length > 20, "the operator logged at debug level");
    const events = await admin.list(builtinKinds.Event, { namespace: ns.name });
    const coreEvents = await kubeConfig()
      .makeApiClient(CoreV1Api)
      .listNamespacedEvent({ namespace: ns.name });
    const models = await admin.list(mlModelKind, { namespace: ns.name });
    const children = [];
    for (const kind of [builtinKinds.Deployment, builtinKinds.Job, builtinKinds.Service, builtinKinds.Pod])
      children.push(...(await admin.list(kind, { namespace: ns.name })).items);
    const places: Record<string, string> = {
      "operator logs": logs,
      events: JSON.stringify(events.items) + JSON.stringify(coreEvents.items),
      "MLModel status": JSON.stringify(models.items.map((m) => (m as { status?: unknown }).status)),
      "children specs": JSON.stringify(children),
    };
    assert.ok(places["MLModel status"]!.includes("Ready"), "statuses were read");
    for (const [where, text] of Object.entries(places)) {
      for (const form of canaryForms) assert.ok(!text.includes(form), `the canary leaked into ${where}`);
    }
  });

  it("the operator may do only what its generated roles say", async () => {
    const authz = kubeConfig().makeApiClient(AuthorizationV1Api);
    const can = async (
      verb: string,
      resource: string,
      group = "",
      namespace = ns.name,
      subresource?: string,
    ) => {
      const review = await authz.createSubjectAccessReview({
        body: {
          spec: {
            user: operatorUser,
            groups: [
              "system:serviceaccounts",
              `system:serviceaccounts:${defaultOperatorNamespace}`,
              "system:authenticated",
            ],
            resourceAttributes: { verb, resource, group, namespace, ...(subresource ? { subresource } : {}) },
          },
        },
      });
      return review.status?.allowed === true;
    };
    // What it needs (so a broken review cannot pass the denials below).
    assert.equal(await can("patch", "deployments", "apps"), true);
    assert.equal(await can("create", "jobs", "batch"), true);
    assert.equal(await can("patch", "mlmodels", "serving.mlmodel.dev", ns.name, "status"), true);
    assert.equal(await can("create", "events", "events.k8s.io"), true);
    const denied: [string, string, string, string?, string?][] = [
      ["create", "pods", ""],
      ["create", "pods", "", ns.name, "exec"],
      ["create", "secrets", ""],
      ["update", "secrets", ""],
      ["delete", "secrets", ""],
      ["patch", "mlmodels", "serving.mlmodel.dev"],
      ["delete", "mlmodels", "serving.mlmodel.dev"],
      ["update", "configmaps", ""],
      ["delete", "namespaces", ""],
      ["patch", "nodes", ""],
      ["create", "clusterrolebindings", "rbac.authorization.k8s.io"],
      ["escalate", "clusterroles", "rbac.authorization.k8s.io"],
      ["impersonate", "users", ""],
      ["create", "serviceaccounts", "", ns.name, "token"],
      ["update", "leases", "coordination.k8s.io", "kube-system"],
      ["patch", "customresourcedefinitions", "apiextensions.k8s.io"],
      // It creates the download Job's Role and RoleBinding, but holds no way around RBAC's
      // escalation check, and never reads, deletes or mints tokens for ServiceAccounts.
      ["escalate", "roles", "rbac.authorization.k8s.io"],
      ["bind", "roles", "rbac.authorization.k8s.io"],
      ["bind", "clusterroles", "rbac.authorization.k8s.io"],
      ["get", "roles", "rbac.authorization.k8s.io"],
      ["delete", "rolebindings", "rbac.authorization.k8s.io"],
      ["get", "serviceaccounts", ""],
      ["delete", "serviceaccounts", ""],
    ];
    const granted = [];
    for (const [verb, resource, group, namespace, sub] of denied) {
      if (await can(verb, resource, group, namespace ?? ns.name, sub))
        granted.push(`${verb} ${resource}${sub ? `/${sub}` : ""}`);
    }
    assert.deepEqual(granted, [], "permissions beyond the generated roles");
  });

  it("the operator can create the download Job's Role, but no Role or binding beyond its own rights", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(opKubeconfig);
    const asOperator = KubeClient.fromKubeConfig(kc);
    const role = (name: string, rules: object[]) =>
      ({
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "Role",
        metadata: { name, namespace: ns.name },
        rules,
      }) as KubeObject;
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 200,
        (err: unknown) => (err instanceof ApiError ? err.code : -1),
      );
    // What the download identity needs (the operator holds patch on mlmodels/status itself).
    assert.equal(
      await code(asOperator.create(builtinKinds.Role, role("dl-like", [downloaderRoleRule("secure")]))),
      200,
    );
    // Anything more is refused by the API server's escalation check.
    assert.equal(
      await code(
        asOperator.create(
          builtinKinds.Role,
          role("escalating", [{ apiGroups: [""], resources: ["secrets"], verbs: ["create"] }]),
        ),
      ),
      403,
    );
    assert.equal(
      await code(
        asOperator.create(builtinKinds.RoleBinding, {
          apiVersion: "rbac.authorization.k8s.io/v1",
          kind: "RoleBinding",
          metadata: { name: "to-admin", namespace: ns.name },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "admin" },
          subjects: [{ kind: "ServiceAccount", name: "default", namespace: ns.name }],
        } as KubeObject),
      ),
      403,
    );
  });

  it("the only bindings of the operator's ServiceAccount are its generated roles", async () => {
    const rbac = kubeConfig().makeApiClient(RbacAuthorizationV1Api);
    const isOperator = (s: { kind: string; name: string; namespace?: string }) =>
      s.kind === "ServiceAccount" && s.name === operatorName && s.namespace === defaultOperatorNamespace;
    const cluster = (await rbac.listClusterRoleBinding()).items.filter((b) => b.subjects?.some(isOperator));
    const namespaced = (await rbac.listRoleBindingForAllNamespaces()).items.filter((b) =>
      b.subjects?.some(isOperator),
    );
    assert.deepEqual(
      cluster.map((b) => b.roleRef.name),
      [operatorName],
    );
    assert.deepEqual(
      namespaced.map((b) => `${b.metadata?.namespace}/${b.roleRef.name}`),
      [`${defaultOperatorNamespace}/${operatorName}-leader-election`],
    );
  });
});
