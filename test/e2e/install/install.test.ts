/**
 * dist/install.yaml as a user installs it: `kubectl apply --server-side` on a fresh control
 * plane, the operator run as a process with the installed ServiceAccount's token (not admin),
 * a sample reaching Ready, and the proof that the generated role grants nothing more.
 *
 * A private cluster: installing cluster-scoped objects and holding the leader Lease must not
 * disturb the tests that share the run's cluster.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { AuthorizationV1Api, type KubeConfig } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import { defaultOperatorNamespace, rulesFor } from "../../../src/install/manifests.ts";
import { leaderElectionAccess, operatorAccess } from "../../../src/operator/access.ts";
import { operatorName } from "../../../src/operator/names.ts";
import { ApiError, builtinKinds, KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { type PrivateCluster, startPrivateCluster, waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { applyObjects, isReady, leftovers, podsOf, provideVolume, readSample } from "../operator/helpers.ts";
import {
  kubectlOk,
  type OperatorProcess,
  parseYamlStream,
  repoRoot,
  serviceAccountKubeConfig,
  startOperatorProcess,
} from "./support.ts";

// biome-ignore lint/suspicious/noExplicitAny: e2e assertions read nested fields of live objects.
type Obj = KubeObject & { spec?: Record<string, any>; status?: Record<string, any> };

const installFile = join(repoRoot, "dist", "install.yaml");
const serviceAccountUser = `system:serviceaccount:${defaultOperatorNamespace}:${operatorName}`;

describe("dist/install.yaml on a fresh local control plane", () => {
  let cluster: PrivateCluster;
  let admin: KubeClient;
  let saKubeConfig: KubeConfig;
  let saKubeConfigPath: string;
  let operator: OperatorProcess | undefined;

  before(async () => {
    cluster = await startPrivateCluster("install");
    admin = KubeClient.fromKubeConfig(cluster.kubeConfig());
    saKubeConfigPath = join(scratchDir("sa"), "operator.kubeconfig");
  });

  after(async () => {
    await operator?.stop();
    await cluster?.stop();
  });

  it("kubectl apply --server-side -f dist/install.yaml succeeds, then the built-in runtimes", async () => {
    const applied = await kubectlOk(cluster.kubeconfigPath, ["apply", "--server-side", "-f", installFile]);
    for (const o of parseYamlStream(readFileSync(installFile, "utf8"))) {
      assert.match(applied, new RegExp(`/${o.metadata.name} serverside-applied`), o.kind);
    }
    await kubectlOk(cluster.kubeconfigPath, ["wait", "--for=condition=Established", "crd", "--all"]);
    const runtimes = await kubectlOk(cluster.kubeconfigPath, [
      "apply",
      "--server-side",
      "-k",
      "deploy/kustomize/runtimes",
    ]);
    assert.match(
      runtimes,
      /clusterservingruntime.serving.mlmodel.dev\/tensorflow-serving serverside-applied/,
    );
  });

  it("the manager Deployment's pods pass the restricted Pod Security level and become available", async () => {
    const ns = await admin.get<Obj>(builtinKinds.Namespace, { name: defaultOperatorNamespace });
    assert.equal(ns?.metadata.labels?.["pod-security.kubernetes.io/enforce"], "restricted");
    // The ReplicaSet could not create a pod that violates the namespace's level.
    const deployment = await waitFor("manager Deployment with 2 available replicas", async () => {
      const d = await admin.get<Obj>(builtinKinds.Deployment, {
        namespace: defaultOperatorNamespace,
        name: operatorName,
      });
      return d?.status?.availableReplicas === 2 ? d : undefined;
    });
    const container = deployment.spec?.template.spec.containers[0];
    assert.ok(container.args.includes("--leader-elect"));
    assert.equal(container.securityContext.readOnlyRootFilesystem, true);
  });

  it("kubectl kustomize deploy/kustomize/base renders the objects of dist/install.yaml", async () => {
    const built = await kubectlOk(cluster.kubeconfigPath, ["kustomize", "deploy/kustomize/base"]);
    const key = (o: KubeObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;
    const byKey = (objects: KubeObject[]) => new Map(objects.map((o) => [key(o), o]));
    const fromKustomize = byKey(parseYamlStream(built));
    const fromDist = byKey(parseYamlStream(readFileSync(installFile, "utf8")));
    assert.deepEqual([...fromKustomize.keys()].sort(), [...fromDist.keys()].sort());
    for (const [k, o] of fromDist) assert.deepEqual(fromKustomize.get(k), o, k);
  });

  it("the operator process, as the installed ServiceAccount, leads and serves a sample to Ready", async () => {
    saKubeConfig = await serviceAccountKubeConfig(
      cluster.kubeConfig(),
      defaultOperatorNamespace,
      operatorName,
      saKubeConfigPath,
    );
    const ns = "install-sample";
    await admin.create(builtinKinds.Namespace, {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: ns, labels: { "pod-security.kubernetes.io/enforce": "restricted" } },
    });
    operator = await startOperatorProcess([
      `--kubeconfig=${saKubeConfigPath}`,
      "--leader-elect",
      `--leader-election-namespace=${defaultOperatorNamespace}`,
      "--log-level=info",
    ]);
    const proc = operator;
    await waitFor(`operator /readyz on ${proc.healthAddress}`, async () => {
      if (proc.child.exitCode !== null) throw new Error(`operator exited:\n${proc.output()}`);
      return (await fetch(`http://${proc.healthAddress}/readyz`).catch(() => undefined))?.status === 200;
    });
    const lease = await waitFor("the operator to hold the leader Lease", async () => {
      const l = await admin.get<Obj>(builtinKinds.Lease, {
        namespace: defaultOperatorNamespace,
        name: "mlmodel-operator",
      });
      return l?.spec?.holderIdentity ? l : undefined;
    });
    // The Lease is written before the log line: wait for the process to say it leads.
    await waitFor("the operator to log that it leads", async () => /became leader/.test(proc.output()));
    assert.ok(lease.spec?.holderIdentity);

    await provideVolume(admin, ns, "resnet-model");
    await applyObjects(admin, ns, readSample("mlmodel-download-then-serve.yaml"));
    let last: Obj | undefined;
    const model = await waitFor(
      "sample resnet to be Ready",
      async () => {
        last = await admin.get<Obj>(mlModelKind, { namespace: ns, name: "resnet" });
        return last?.status?.phase === "Ready" && last.status.observedGeneration === last.metadata.generation
          ? last
          : undefined;
      },
      { timeoutMs: 180_000 },
    ).catch((err: Error) => {
      throw new Error(
        `${err.message}; status ${JSON.stringify(last?.status)}\noperator log:\n${proc.output()}`,
      );
    });
    assert.equal(model.status?.readyReplicas, 2);
    assert.equal((await podsOf(admin, ns, "resnet")).filter(isReady).length, 2);
    const deployment = await admin.get<Obj>(builtinKinds.Deployment, { namespace: ns, name: "resnet" });
    assert.equal(deployment?.metadata.ownerReferences?.[0]?.name, "resnet");
    const service = await admin.get<Obj>(builtinKinds.Service, { namespace: ns, name: "resnet" });
    assert.equal(service?.metadata.ownerReferences?.[0]?.kind, "MLModel");
    const job = await admin.get<Obj>(builtinKinds.Job, { namespace: ns, name: model.status?.download.job });
    assert.equal(job?.status?.succeeded, 1);
    assert.equal(model.status?.url, `http://resnet.${ns}.svc:8501`);

    // Every write came from the ServiceAccount, and none was refused.
    assert.doesNotMatch(proc.output(), /forbidden/i, "the operator hit a permission it does not have");
    const audit = readFileSync(cluster.auditLog, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { user: { username: string }; responseStatus?: { code: number } });
    const saWrites = audit.filter((e) => e.user.username === serviceAccountUser);
    assert.ok(saWrites.length > 0, "the ServiceAccount made the operator's writes");
    assert.deepEqual(
      saWrites.filter((e) => e.responseStatus?.code === 403),
      [],
      "no write by the ServiceAccount was forbidden",
    );
  });

  it("the same process serves the other samples to Ready, and deleting them leaves nothing behind", async () => {
    const ns = "install-sample";
    const proc = operator!;
    const samples: [string, string, number][] = [
      ["tfserving-operator.yaml", "tfserv-sample", 3],
      ["machinemodel.yaml", "image-classifier-v1", 1],
    ];
    for (const [file, name, replicas] of samples) {
      await applyObjects(admin, ns, readSample(file));
      let last: Obj | undefined;
      await waitFor(`sample ${name} to be Ready`, async () => {
        last = await admin.get<Obj>(mlModelKind, { namespace: ns, name });
        return last?.status?.phase === "Ready" && last.status.observedGeneration === last.metadata.generation;
      }).catch((err: Error) => {
        throw new Error(
          `${err.message}; status ${JSON.stringify(last?.status)}\noperator log:\n${proc.output()}`,
        );
      });
      assert.equal((await podsOf(admin, ns, name)).filter(isReady).length, replicas, name);
    }
    for (const name of ["resnet", ...samples.map(([, n]) => n)]) {
      await admin.delete(mlModelKind, { namespace: ns, name });
    }
    for (const name of ["resnet", ...samples.map(([, n]) => n)]) {
      await waitFor(`${name} and its children to be gone`, async () => {
        const model = await admin.get(mlModelKind, { namespace: ns, name });
        return !model && (await leftovers(admin, ns, name)).length === 0;
      });
    }
    assert.doesNotMatch(proc.output(), /forbidden/i, "the operator hit a permission it does not have");
  });

  it("grants the generated role's permissions and not one outside it", async () => {
    const authz = saKubeConfig.makeApiClient(AuthorizationV1Api);
    const can = async (verb: string, group: string, resource: string, namespace?: string) => {
      const [res, subresource] = resource.split("/");
      const review = await authz.createSelfSubjectAccessReview({
        body: {
          spec: { resourceAttributes: { verb, group, resource: res, subresource, namespace } },
        },
      });
      return review.status?.allowed === true;
    };
    // Every generated rule is granted (so a denial below is the role's limit, not a broken token).
    for (const rule of rulesFor(operatorAccess)) {
      for (const resource of rule.resources) {
        for (const verb of rule.verbs) {
          assert.equal(await can(verb, rule.apiGroups[0]!, resource), true, `${verb} ${resource}`);
        }
      }
    }
    for (const rule of rulesFor([leaderElectionAccess])) {
      for (const verb of rule.verbs) {
        assert.equal(await can(verb, "coordination.k8s.io", "leases", defaultOperatorNamespace), true);
      }
    }
    const outside: [string, string, string, string?][] = [
      // Its Secret cache lists and watches metadata only; it never reads a Secret by name.
      ["get", "", "secrets"],
      ["patch", "", "secrets"],
      ["update", "", "secrets"],
      ["delete", "", "secrets"],
      ["delete", "", "nodes"],
      ["create", "", "pods"],
      ["delete", "", "namespaces"],
      ["update", "serving.mlmodel.dev", "mlmodels"],
      ["delete", "serving.mlmodel.dev", "mlmodels"],
      ["create", "serving.mlmodel.dev", "clusterservingruntimes"],
      ["create", "rbac.authorization.k8s.io", "clusterrolebindings"],
      ["escalate", "rbac.authorization.k8s.io", "clusterroles"],
      ["create", "", "serviceaccounts/token"],
      ["update", "coordination.k8s.io", "leases", "default"],
      ["get", "coordination.k8s.io", "leases", "kube-system"],
    ];
    for (const [verb, group, resource, namespace] of outside) {
      assert.equal(
        await can(verb, group, resource, namespace),
        false,
        `${verb} ${group}/${resource}${namespace ? ` in ${namespace}` : ""} must not be granted`,
      );
    }
    // And the API server enforces it on a real request: the one Secret write RBAC grants
    // (create, for model URIs) is held by the installed admission policy to that one type.
    const sa = KubeClient.fromKubeConfig(saKubeConfig);
    await assert.rejects(
      sa.create(builtinKinds.Secret, {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "stolen", namespace: "default" },
        stringData: { a: "b" },
      }),
      (err: unknown) =>
        err instanceof ApiError && err.code === 403 && /mlmodel-operator-secrets/.test(err.message),
    );
  });
});
