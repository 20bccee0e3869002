/**
 * Security checks on the shared control plane, with the operator as a real process under its
 * own ServiceAccount:
 * - generated pods (serving and download) are admitted in a namespace enforcing the
 *   `restricted` Pod Security level (and that enforcement is real: a privileged pod is refused);
 * - a canary Secret value, and a canary token in a pre-signed URL's query string, never show in
 *   the operator's logs (debug level), Events, status, children (but the Secrets that must hold
 *   them) or `mlmodel status/describe/history`; the real downloader, run with the Job's exact
 *   args and env (Secret references resolved as the kubelet would), downloads the signed URL
 *   from a loopback server that requires the signature, and prints and reports no token either;
 *   a rollback downloads the older revision's exact URI from that revision's Secret;
 * - the operator has no permission beyond its generated roles (SubjectAccessReviews), and may
 *   create only model-URI Secrets (its admission policy).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  AuthorizationV1Api,
  CoreV1Api,
  KubeConfig,
  RbacAuthorizationV1Api,
  type V1Job,
} from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel } from "../../../src/api/mlmodel.ts";
import { downloaderRoleRule } from "../../../src/downloader/contract.ts";
import { install } from "../../../src/install/install.ts";
import { defaultOperatorNamespace } from "../../../src/install/manifests.ts";
import { uriSecretType } from "../../../src/operator/desired.ts";
import { childNames, labels, operatorName } from "../../../src/operator/names.ts";
import { ApiError, builtinKinds, KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import {
  OperatorProcess,
  operatorKubeconfig,
  operatorUser,
  waitReady,
} from "../../chaos/operator-process.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { FileServer } from "../../integration/downloader/file-server.ts";
import { serviceAccountKubeConfig } from "../install/support.ts";
import { adminClient, isReady, podsOf, provideVolume, repoRoot, waitForPhase } from "../operator/helpers.ts";

const canary = `canary-${crypto.randomUUID()}`;
// The signature of a pre-signed URL: a second canary, which only the URI carries.
const token = `token${crypto.randomUUID().replaceAll("-", "")}`;
const canaryForms = [
  canary,
  Buffer.from(canary).toString("base64"),
  token,
  Buffer.from(token).toString("base64"),
];
const signedModel = "signed";

function leaks(text: string): string[] {
  return canaryForms.filter((form) => text.includes(form));
}

/**
 * `mlmodel ARGS` as a child process: its exit code, stdout and stderr together. Not spawnSync:
 * the test's loopback server answers from this process's event loop.
 */
async function runMlmodel(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, [join(repoRoot, "src", "cli", "main.ts"), ...args], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  for (const stream of [child.stdout, child.stderr])
    stream.on("data", (d: Buffer) => {
      output += d.toString();
    });
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  return { code, output };
}

/** A view of `mlmodel`, with the admin kubeconfig of the test run. */
async function mlmodel(args: string[]): Promise<string> {
  const { code, output } = await runMlmodel(args, { ...process.env, NO_COLOR: "1" });
  assert.equal(code, 0, `mlmodel ${args.join(" ")}: ${output}`);
  return output;
}

type EnvVar = { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } };
type Container = {
  args?: string[];
  command?: string[];
  env?: EnvVar[];
  envFrom?: { secretRef?: { name: string } }[];
};

/** A container's environment as the kubelet gives it: Secret references resolved. */
async function resolvedEnv(
  admin: KubeClient,
  namespace: string,
  c: Container,
): Promise<Record<string, string>> {
  const secret = async (name: string) =>
    (
      await admin.get<KubeObject & { data?: Record<string, string> }>(builtinKinds.Secret, {
        namespace,
        name,
      })
    )?.data ?? {};
  const decode = (b64: string) => Buffer.from(b64, "base64").toString("utf8");
  const env: Record<string, string> = {};
  for (const from of c.envFrom ?? [])
    if (from.secretRef)
      for (const [k, v] of Object.entries(await secret(from.secretRef.name))) env[k] = decode(v);
  // Explicit env wins over envFrom, as in a pod.
  for (const e of c.env ?? []) {
    const ref = e.valueFrom?.secretKeyRef;
    env[e.name] = ref ? decode((await secret(ref.name))[ref.key] ?? "") : (e.value ?? "");
  }
  return env;
}

describe("security", () => {
  let ns: TestNamespace;
  let admin: KubeClient;
  let op: OperatorProcess;
  let logFile: string;
  const volumes: string[] = [];
  let opKubeconfig: string;
  let dir: string;
  let signedUri: string;
  // Like S3 with a pre-signed URL: the object only for the right signature.
  const server = new FileServer();
  const served: string[] = [];
  let refuse = false;

  before(async () => {
    ns = await createNamespace("e2e-security", { podSecurity: "restricted" });
    admin = await adminClient();
    await install(admin);
    dir = scratchDir("security");
    logFile = join(dir, "operator.log");
    opKubeconfig = await operatorKubeconfig(admin, kubeConfig(), dir);
    op = await OperatorProcess.start({
      kubeconfig: opKubeconfig,
      namespace: ns.name,
      logFile,
      logLevel: "debug",
    });
    await waitReady(op);
    volumes.push(await provideVolume(admin, ns.name, "secure-model"));
    volumes.push(await provideVolume(admin, ns.name, childNames.storage(signedModel)));
    await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "canary-creds", namespace: ns.name },
      stringData: {
        AWS_ACCESS_KEY_ID: canary,
        AWS_SECRET_ACCESS_KEY: canary,
        MLMODEL_HTTP_BEARER_TOKEN: canary,
      },
    } as KubeObject);
    await server.start();
    server.routes.push((req, res) => {
      const url = new URL(req.url ?? "/", server.url);
      if (url.pathname !== "/bucket/resnet.bin") return false;
      if (refuse || url.searchParams.get("X-Amz-Signature") !== token) {
        // Servers quote the request they refuse.
        res.writeHead(403).end(`SignatureDoesNotMatch: ${req.url}`);
        return true;
      }
      served.push(url.search);
      res.writeHead(200, { "content-length": 3 * 1024 * 1024 }).end(Buffer.alloc(3 * 1024 * 1024, 7));
      return true;
    });
    signedUri = `${server.url}/bucket/resnet.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=${token}`;
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
    await admin.apply(
      mlModelKind,
      model(signedModel, {
        model: { uri: signedUri, format: "tensorflow", credentialsSecretRef: { name: "canary-creds" } },
        storage: { size: "1Gi" },
        replicas: 1,
      }),
      { fieldManager: "e2e", force: true },
    );
    await waitForPhase(admin, ns.name, "secure", "Ready");
    await waitForPhase(admin, ns.name, "custom", "Ready");
    await waitForPhase(admin, ns.name, signedModel, "Ready");
  });

  after(async () => {
    await op?.kill("SIGTERM");
    await server.stop();
    await ns?.delete();
    for (const v of volumes) await admin.delete(builtinKinds.PersistentVolume, { name: v }).catch(() => {});
  });

  const signedJob = async (): Promise<V1Job> =>
    waitFor("the signed model's download Job", async () => {
      const jobs = await admin.list(builtinKinds.Job, {
        namespace: ns.name,
        labelSelector: `${labels.model}=${signedModel},${labels.component}=download`,
      });
      return jobs.items[0] as unknown as V1Job | undefined;
    });

  /** The Secret a Job reads its URI from (env valueFrom secretKeyRef), with the URI it holds. */
  async function uriSecretOf(job: V1Job) {
    const ref = job.spec?.template.spec?.containers[0]?.env?.find((e) => e.name === "MLMODEL_URI")?.valueFrom
      ?.secretKeyRef;
    assert.ok(ref?.name, "the Job reads its URI from a Secret");
    const secret = await admin.get<KubeObject & { type?: string; data?: Record<string, string> }>(
      builtinKinds.Secret,
      { namespace: ns.name, name: ref.name },
    );
    assert.ok(secret, `Secret ${ref.name} exists`);
    return { secret, uri: Buffer.from(secret.data?.[ref.key] ?? "", "base64").toString("utf8") };
  }

  it("a signed URL reaches the Job only through its revision's Secret", async () => {
    const job = await signedJob();
    const c = job.spec!.template.spec!.containers[0]!;
    assert.deepEqual(c.args?.slice(0, 2), ["--uri-from-env", "MLMODEL_URI"]);
    const { secret, uri } = await uriSecretOf(job);
    assert.equal(uri, signedUri, "the Secret holds the exact URI");
    assert.equal(secret.type, uriSecretType);
    const owner = secret.metadata.ownerReferences?.[0];
    assert.equal(owner?.kind, "ControllerRevision");
    assert.equal(owner?.controller, true);
    const m = await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: signedModel });
    assert.equal(
      owner?.name,
      `${signedModel}-${m?.status?.revision?.current}`,
      "owned by the served revision",
    );
    assert.equal(secret.metadata.name, childNames.uriSecret(signedModel, m!.status!.revision!.current!));
  });

  it("the real downloader, with the Job's exact args and env, downloads the signed URL and shows no token", async () => {
    const job = await signedJob();
    const pod = job.spec!.template.spec!;
    const c = pod.containers[0] as Container;
    // The Job's own identity: a kubeconfig holding only a token of its ServiceAccount.
    const jobKubeconfig = join(dir, "downloader.kubeconfig");
    await serviceAccountKubeConfig(kubeConfig(), ns.name, pod.serviceAccountName!, jobKubeconfig);
    const env = await resolvedEnv(admin, ns.name, c);
    assert.equal(env.MLMODEL_URI, signedUri, "the kubelet would give the exact URI");

    const run = async (name: string) => {
      const args = [...(c.args ?? [])];
      args[args.indexOf("--dest") + 1] = join(dir, name);
      const terminationLog = join(dir, `${name}.termination-log`);
      const { code, output } = await runMlmodel([...c.command!.slice(1), ...args], {
        PATH: process.env.PATH,
        HOME: dir,
        ...env,
        KUBECONFIG: jobKubeconfig,
        MLMODEL_TERMINATION_LOG: terminationLog,
      });
      const said = existsSync(terminationLog) ? readFileSync(terminationLog, "utf8") : "";
      return { code, output, said };
    };
    const status = async () =>
      JSON.stringify(
        (await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: signedModel }))?.status,
      );

    const ok = await run("downloaded");
    assert.equal(ok.code, 0, ok.output);
    assert.ok(served.length >= 1, "the server was asked with the signature: the full URI was used");
    assert.match(ok.output, /X-Amz-Signature=REDACTED/);
    const completed = await waitFor("the downloader's Complete report", async () => {
      const text = await status();
      return text.includes('"phase":"Complete"') ? text : undefined;
    });
    assert.deepEqual(
      leaks(ok.output + completed + readFileSync(join(dir, "downloaded", ".mlmodel-complete.json"), "utf8")),
      [],
    );

    refuse = true;
    const denied = await run("denied");
    refuse = false;
    assert.equal(denied.code, 1, denied.output);
    assert.match(denied.said, /X-Amz-Signature=REDACTED.*: AccessDenied: /);
    const failed = await waitFor("the downloader's Failed report", async () => {
      const text = await status();
      return text.includes('"phase":"Failed"') ? text : undefined;
    });
    assert.match(failed, /AccessDenied/);
    assert.deepEqual(
      leaks(denied.output + denied.said + failed),
      [],
      "failure output, termination message, status",
    );
  });

  it("a rollback downloads the older revision's exact URI, from that revision's Secret", async () => {
    const first = await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: signedModel });
    const old = await signedJob();
    // A revision that changes the serving pods only: same URI, same download Job, no new Job;
    // its URI Secret exists all the same, for a rollback to it.
    await admin.patch(
      mlModelKind,
      { namespace: ns.name, name: signedModel },
      { spec: { resources: { cpu: "100m" } } },
      "merge",
    );
    const good = await waitFor("the pods-only revision to serve", async () => {
      const m = await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: signedModel });
      const current = m?.status?.revision?.current;
      return m?.status?.phase === "Ready" && current && current !== first?.status?.revision?.current
        ? m
        : undefined;
    });
    const goodRevision = good.status!.revision!.current!;
    assert.equal((await signedJob()).metadata?.uid, old.metadata?.uid, "no new download Job");
    assert.ok(
      await admin.get(builtinKinds.Secret, {
        namespace: ns.name,
        name: childNames.uriSecret(signedModel, goodRevision),
      }),
      "the new revision's URI Secret",
    );
    // Its download Job is gone (as after pruning): serving it again needs a new Job.
    await admin.delete(
      builtinKinds.Job,
      { namespace: ns.name, name: old.metadata!.name! },
      { propagationPolicy: "Background" },
    );
    await waitFor(
      "the old Job to go",
      async () => !(await admin.get(builtinKinds.Job, { namespace: ns.name, name: old.metadata!.name! })),
    );
    await admin.patch(
      mlModelKind,
      { namespace: ns.name, name: signedModel },
      { spec: { model: { uri: "s3://bucket/simulate-job-failure/resnet" } } },
      "merge",
    );
    const rolledBack = await waitFor("the model to roll back", async () => {
      const m = await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: signedModel });
      const c = m?.status?.conditions?.find((x) => x.type === "RolledBack");
      return c?.status === "True" && m?.status?.phase === "Ready" ? m : undefined;
    });
    assert.equal(rolledBack.status?.revision?.current, goodRevision, "the last ready revision serves again");
    const again = await waitFor("the rollback's download Job", async () => {
      const jobs = (
        await admin.list(builtinKinds.Job, {
          namespace: ns.name,
          labelSelector: `${labels.model}=${signedModel},${labels.component}=download`,
        })
      ).items as unknown as V1Job[];
      return jobs.find((j) => j.metadata?.name === old.metadata?.name);
    });
    const { secret, uri } = await uriSecretOf(again);
    assert.equal(uri, signedUri, "the exact URI of the revision served again");
    assert.equal(secret.metadata.name, childNames.uriSecret(signedModel, goodRevision));
    assert.deepEqual(leaks(JSON.stringify(again)), []);

    // `mlmodel rollback` writes the spec back: with the exact URI, read from that Secret.
    const number = rolledBack.status?.revision?.currentNumber;
    assert.ok(number, "the served revision has a number");
    await mlmodel(["rollback", signedModel, "-n", ns.name, "--to-revision", String(number)]);
    const written = await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: signedModel });
    assert.equal(written?.spec.model.uri, signedUri, "the spec holds the exact URI again");
    await waitFor("the spec's revision to serve, rolled forward", async () => {
      const m = await admin.get<MLModel>(mlModelKind, { namespace: ns.name, name: signedModel });
      const rolled = m?.status?.conditions?.some((x) => x.type === "RolledBack" && x.status === "True");
      return m?.status?.phase === "Ready" && !rolled && m.status?.revision?.current === goodRevision;
    });
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
      assert.equal(spec?.serviceAccountName, childNames.downloader(p.metadata.labels?.[labels.model] ?? ""));
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

  it("the canaries never appear in logs, Events, status, CLI views or children, but the Secrets that hold them", async () => {
    const logs = readFileSync(logFile, "utf8");
    assert.ok(logs.split("\n").length > 20, "the operator logged at debug level");
    const events = await admin.list(builtinKinds.Event, { namespace: ns.name });
    const coreEvents = await kubeConfig()
      .makeApiClient(CoreV1Api)
      .listNamespacedEvent({ namespace: ns.name });
    const models = await admin.list(mlModelKind, { namespace: ns.name });
    const children: Record<string, KubeObject[]> = {};
    for (const kind of [
      builtinKinds.Deployment,
      builtinKinds.ReplicaSet,
      builtinKinds.Job,
      builtinKinds.Service,
      builtinKinds.Pod,
      builtinKinds.ConfigMap,
      builtinKinds.ControllerRevision,
      builtinKinds.PersistentVolumeClaim,
      builtinKinds.ServiceAccount,
      builtinKinds.Role,
      builtinKinds.RoleBinding,
      builtinKinds.HorizontalPodAutoscaler,
      builtinKinds.PodDisruptionBudget,
      builtinKinds.Secret,
    ])
      children[kind.kind] = (await admin.list(kind, { namespace: ns.name })).items;
    // The Secrets that must hold a canary: the user's credentials, and the URI Secret(s).
    const holders = (children.Secret ?? []).filter(
      (x) => x.metadata.name === "canary-creds" || (x as { type?: string }).type === uriSecretType,
    );
    assert.ok(holders.length >= 2, "the credentials Secret and a URI Secret");
    children.Secret = (children.Secret ?? []).filter((x) => !holders.includes(x));
    assert.ok((children.ControllerRevision ?? []).length >= 2, "revisions were read");
    const views = [
      ["status", "-n", ns.name],
      ["status", "-n", ns.name, "-o", "yaml"],
      ["status", signedModel, "-n", ns.name, "-o", "json"],
      ["describe", signedModel, "-n", ns.name],
      ["describe", signedModel, "-n", ns.name, "-o", "yaml"],
      ["history", signedModel, "-n", ns.name],
      ["history", signedModel, "-n", ns.name, "-o", "json"],
    ];
    const cli = await Promise.all(views.map(mlmodel));
    assert.match(cli[3]!, /X-Amz-Signature=REDACTED/, "describe shows the URI, redacted");
    const places: Record<string, string> = {
      "operator logs": logs,
      events: JSON.stringify(events.items) + JSON.stringify(coreEvents.items),
      "MLModel status": JSON.stringify(models.items.map((m) => (m as { status?: unknown }).status)),
      "mlmodel status/describe/history": cli.join("\n"),
      ...Object.fromEntries(Object.entries(children).map(([kind, items]) => [kind, JSON.stringify(items)])),
    };
    assert.ok(places["MLModel status"]!.includes("Ready"), "statuses were read");
    for (const [where, text] of Object.entries(places))
      assert.deepEqual(leaks(text), [], `leaked into ${where}`);
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
    // Model URIs with credentials in them; its admission policy holds it to that type (below).
    assert.equal(await can("create", "secrets"), true);
    const denied: [string, string, string, string?, string?][] = [
      ["create", "pods", ""],
      ["create", "pods", "", ns.name, "exec"],
      ["get", "secrets", ""],
      ["patch", "secrets", ""],
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
    // Named and labelled as a download identity, which the install's admission policy requires.
    const role = (name: string, rules: object[]) =>
      ({
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "Role",
        metadata: { name: childNames.downloader(name), namespace: ns.name, labels: { [labels.model]: name } },
        rules,
      }) as KubeObject;
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 200,
        (err: unknown) => (err instanceof ApiError ? err.code : -1),
      );
    // What the download identity needs (the operator holds patch on mlmodels/status itself).
    assert.equal(
      await code(asOperator.create(builtinKinds.Role, role("dl-like", [downloaderRoleRule("dl-like")]))),
      200,
    );
    // Anything more is refused by the API server's escalation check.
    assert.equal(
      await code(
        asOperator.create(
          builtinKinds.Role,
          role("escalating", [{ apiGroups: [""], resources: ["secrets"], verbs: ["delete"] }]),
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

  it("the operator may create model-URI Secrets only: never one that would mint a ServiceAccount token", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(opKubeconfig);
    const asOperator = KubeClient.fromKubeConfig(kc);
    const attempt = (name: string, type: string, annotations?: Record<string, string>) =>
      asOperator
        .create(builtinKinds.Secret, {
          apiVersion: "v1",
          kind: "Secret",
          type,
          metadata: { name, namespace: ns.name, ...(annotations ? { annotations } : {}) },
          data: {},
        } as KubeObject)
        .then(
          () => 200,
          (err: unknown) => (err instanceof ApiError ? err.code : -1),
        );
    const token = await waitFor("the admission policy to refuse a token Secret", async () => {
      const code = await attempt("minted", "kubernetes.io/service-account-token", {
        "kubernetes.io/service-account.name": "default",
      });
      return code === 200 ? undefined : code;
    });
    assert.equal(token, 403);
    assert.equal(await attempt("opaque", "Opaque"), 403);
    assert.equal(await attempt("model-uri", uriSecretType), 200, "the one type it needs");
    await admin.delete(builtinKinds.Secret, { namespace: ns.name, name: "model-uri" });
    // The policy binds only the operator: a user still creates Secrets of any type.
    const byAdmin = await admin.create(builtinKinds.Secret, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "users-own", namespace: ns.name },
      stringData: { k: "v" },
    } as KubeObject);
    assert.equal(byAdmin.metadata.name, "users-own");
  });

  it("deleting the model removes its URI Secrets with its revisions", async () => {
    const uriSecrets = async () =>
      (
        await admin.list(builtinKinds.Secret, {
          namespace: ns.name,
          labelSelector: `${labels.model}=${signedModel}`,
        })
      ).items;
    assert.ok((await uriSecrets()).length >= 1);
    await admin.delete(mlModelKind, { namespace: ns.name, name: signedModel });
    await waitFor("the URI Secrets to be collected", async () => (await uriSecrets()).length === 0);
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
    assert.deepEqual(namespaced.map((b) => `${b.metadata?.namespace}/${b.roleRef.name}`).sort(), [
      `${defaultOperatorNamespace}/${operatorName}-leader-election`,
      // Find the node cache's Service and read its agents' states (docs/install.md).
      `${defaultOperatorNamespace}/${operatorName}-node-cache`,
    ]);
  });
});
