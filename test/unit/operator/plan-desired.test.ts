import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  desiredAutoscaler,
  desiredDeployment,
  desiredDownloadIdentity,
  desiredDownloadJob,
  desiredService,
  desiredStorage,
  servingPodTemplate,
} from "../../../src/operator/desired.ts";
import { childNames } from "../../../src/operator/names.ts";
import { PlanError, planModel } from "../../../src/operator/plan.ts";
import { resolveRuntime } from "../../../src/operator/runtime-selection.ts";
import { model, owner, runtimes, tf, tfServing } from "./fixtures.ts";

const config = { downloaderImage: "example.com/mlmodel:1" };

describe("resolveRuntime", () => {
  it("picks the highest-priority runtime that auto-selects the format", () => {
    const r = resolveRuntime(model({ model: { uri: "s3://b/m", format: "onnx" } }), [], runtimes);
    assert.deepEqual(r.ok && r.runtime.ref, "ClusterServingRuntime/triton");
  });
  it("prefers a namespaced runtime of the same name over the cluster one", () => {
    const mine = {
      ...tfServing,
      kind: "ServingRuntime" as const,
      metadata: { name: "tensorflow-serving", namespace: "ml" },
    };
    const r = resolveRuntime(
      model({ model: { format: "tensorflow", uri: "s3://b" }, runtime: "tensorflow-serving" }),
      [mine],
      runtimes,
    );
    assert.equal(r.ok && r.runtime.ref, "ServingRuntime/tensorflow-serving");
  });
  it("says which runtimes exist when spec.runtime names none", () => {
    const r = resolveRuntime(model({ model: { uri: "s3://b" }, runtime: "tensorflw" }), [], runtimes);
    assert.equal(r.ok, false);
    assert.ok(!r.ok && r.reason === "RuntimeNotFound");
    assert.match(
      !r.ok ? r.message : "",
      /spec.runtime "tensorflw".*available: mlserver, tensorflow-serving, torchserve, triton/,
    );
  });
  it("lists the formats served when no runtime auto-selects the format", () => {
    const r = resolveRuntime(model({ model: { uri: "s3://b", format: "caffe" } }), [], runtimes);
    assert.ok(!r.ok && r.reason === "NoRuntimeForFormat");
    assert.match(!r.ok ? r.message : "", /"caffe".*onnx/);
  });
  it("rejects a runtime that does not serve the given format", () => {
    const r = resolveRuntime(
      model({ model: { uri: "s3://b", format: "sklearn" }, runtime: "torchserve" }),
      [],
      runtimes,
    );
    assert.ok(!r.ok && r.reason === "FormatNotSupported");
  });
  it("runs a custom image without a runtime", () => {
    const r = resolveRuntime(model({ model: { path: "/m" }, image: "me/server:1" }), [], runtimes);
    assert.deepEqual(r, { ok: true, runtime: { ref: "custom" } });
  });
});

describe("planModel and desired children", () => {
  const spec = { model: { uri: "s3://bucket/resnet", format: "tensorflow", version: "7" }, replicas: 3 };

  it("downloads into a per-content directory under a versioned base path", () => {
    const plan = planModel(model(spec), tf);
    assert.equal(plan.source.type, "download");
    if (plan.source.type !== "download") return;
    assert.match(plan.source.dest, /^\/mnt\/models\/[0-9a-f]{10}\/7$/);
    assert.equal(plan.modelDir, plan.source.dest.replace(/\/7$/, ""));
    const other = planModel(model({ ...spec, model: { ...spec.model, version: "8" } }), tf);
    assert.notEqual(other.source.type === "download" && other.source.jobName, plan.source.jobName);
  });

  it("builds a restricted download Job running `mlmodel download` with the credentials", () => {
    const plan = planModel(
      model({
        ...spec,
        model: { ...spec.model, sha256: "a".repeat(64), credentialsSecretRef: { name: "creds" } },
      }),
      tf,
    );
    const job = desiredDownloadJob(plan, owner, config)!;
    const pod = job.spec!.template.spec!;
    const c = pod.containers[0]!;
    assert.deepEqual(c.command, ["mlmodel", "download"]);
    assert.deepEqual(c.args, [
      "--uri",
      "s3://bucket/resnet",
      "--dest",
      (plan.source as { dest: string }).dest,
      "--sha256",
      "a".repeat(64),
    ]);
    assert.equal(c.terminationMessagePolicy, "FallbackToLogsOnError");
    assert.deepEqual(c.envFrom, [{ secretRef: { name: "creds" } }]);
    assert.equal(pod.securityContext?.runAsNonRoot, true);
    assert.equal(pod.securityContext?.seccompProfile?.type, "RuntimeDefault");
    assert.deepEqual(c.securityContext?.capabilities?.drop, ["ALL"]);
    assert.equal(c.securityContext?.allowPrivilegeEscalation, false);
    assert.equal(pod.restartPolicy, "Never");
    assert.deepEqual(job.metadata?.ownerReferences, [owner]);
  });

  it("gives the download Job its own identity: a token that may only patch its model's status", () => {
    const plan = planModel(model(spec), tf);
    const job = desiredDownloadJob(plan, owner, config)!;
    const pod = job.spec!.template.spec!;
    const c = pod.containers[0]!;
    const [account, role, binding] = desiredDownloadIdentity(plan, owner)!;
    assert.equal(account.metadata?.name, "resnet-downloader");
    assert.equal(pod.serviceAccountName, account.metadata?.name);
    assert.equal(pod.automountServiceAccountToken, true, "the download pod mounts its token");
    assert.equal(account.automountServiceAccountToken, false, "nothing else using the account does");
    assert.equal(
      desiredDeployment(plan, owner).spec!.template.spec!.automountServiceAccountToken,
      false,
      "serving pods mount no token",
    );
    assert.deepEqual(
      c.env?.filter((e) => e.name === "MLMODEL_NAME" || e.name === "MLMODEL_NAMESPACE"),
      [
        { name: "MLMODEL_NAME", value: "resnet" },
        { name: "MLMODEL_NAMESPACE", value: "ml" },
      ],
    );
    assert.deepEqual(role.rules, [
      {
        apiGroups: ["serving.mlmodel.dev"],
        resources: ["mlmodels/status"],
        resourceNames: ["resnet"],
        verbs: ["patch"],
      },
    ]);
    assert.deepEqual(binding.roleRef, {
      apiGroup: "rbac.authorization.k8s.io",
      kind: "Role",
      name: role.metadata?.name,
    });
    assert.deepEqual(binding.subjects, [
      { kind: "ServiceAccount", name: "resnet-downloader", namespace: "ml" },
    ]);
    for (const o of [account, role, binding]) {
      assert.deepEqual(o.metadata?.ownerReferences, [owner], `${o.kind} goes with the MLModel`);
      assert.equal(o.metadata?.namespace, "ml");
    }
    // The longest model name the API accepts (48) still gives a name within 63 characters.
    const long = "m".repeat(48);
    assert.ok(childNames.downloader(long).length <= 63);
    const pvc = planModel(model({ model: { uri: "pvc://shared/models/resnet", format: "tensorflow" } }), tf);
    assert.equal(desiredDownloadIdentity(pvc, owner), undefined, "no download, no identity");
  });

  it("fails the download Job at once on exit 1 (failed) and 2 (bad flags), retries other exits", () => {
    const job = desiredDownloadJob(planModel(model(spec), tf), owner, config)!;
    assert.deepEqual(job.spec?.podFailurePolicy?.rules, [
      { action: "FailJob", onExitCodes: { containerName: "download", operator: "In", values: [1, 2] } },
    ]);
    assert.ok((job.spec?.backoffLimit ?? 0) > 0, "an OOM kill or eviction is retried");
  });

  it("sizes the claim from spec.storage, default 10Gi", () => {
    assert.deepEqual(desiredStorage(planModel(model(spec), tf), owner)?.spec?.resources?.requests, {
      storage: "10Gi",
    });
    const sized = desiredStorage(planModel(model({ ...spec, storage: { size: "50Gi" } }), tf), owner);
    assert.deepEqual(sized?.spec?.resources?.requests, { storage: "50Gi" });
  });

  it("mounts a pvc:// claim read-only in place: no storage, no Job", () => {
    const plan = planModel(model({ model: { uri: "pvc://shared/models/resnet", format: "tensorflow" } }), tf);
    assert.equal(desiredStorage(plan, owner), undefined);
    assert.equal(desiredDownloadJob(plan, owner, config), undefined);
    const pod = desiredDeployment(plan, owner).spec!.template.spec!;
    assert.deepEqual(pod.volumes?.[0], {
      name: "model",
      persistentVolumeClaim: { claimName: "shared", readOnly: true },
    });
    assert.deepEqual(pod.containers[0]!.volumeMounts?.[0], {
      name: "model",
      mountPath: "/mnt/models",
      readOnly: true,
      subPath: "models/resnet",
    });
  });

  it("gives the serving container per-runtime probes, ports, GPU and a restricted context", () => {
    const plan = planModel(
      model({ ...spec, resources: { cpu: "2", memory: "4Gi", gpu: 1 }, startupTimeoutSeconds: 1800 }),
      tf,
    );
    const d = desiredDeployment(plan, owner);
    const c = d.spec!.template.spec!.containers[0]!;
    assert.equal(d.spec?.replicas, 3);
    assert.deepEqual(c.readinessProbe?.httpGet, { path: "/v1/models/resnet", port: "rest" });
    assert.equal(c.startupProbe?.failureThreshold, 180, "1800s at a 10s period");
    assert.deepEqual(
      c.ports?.map((p) => [p.name, p.containerPort]),
      [
        ["rest", 8501],
        ["grpc", 8500],
      ],
    );
    assert.deepEqual(c.resources, {
      requests: { cpu: "2", memory: "4Gi", "nvidia.com/gpu": "1" },
      limits: { "nvidia.com/gpu": "1" },
    });
    assert.equal(d.spec!.template.spec!.automountServiceAccountToken, false);
    assert.deepEqual(d.spec?.strategy?.rollingUpdate, { maxUnavailable: 0, maxSurge: 1 });
    // A stopping pod keeps serving until no new connection reaches it (zero failed requests in a roll).
    const command = c.lifecycle?.preStop?.exec?.command;
    assert.deepEqual(command?.slice(0, 2), ["/bin/sh", "-c"], "a runtime's image drains by observation");
    assert.match(command![2]!, /\/proc\/net\/snmp/);
    assert.match(command![2]!, /-lt 20 \]/, "bounded by drainMaxSeconds");
    assert.ok(
      d.spec!.template.spec!.terminationGracePeriodSeconds! > 20,
      "the grace period outlasts the longest drain, leaving the server time to shut down",
    );
  });

  it("drains a custom image, which may have no shell, with the kubelet's own sleep", () => {
    const plan = planModel(model({ model: { path: "/m" }, image: "me/s:1" }), { ref: "custom" });
    const c = desiredDeployment(plan, owner).spec!.template.spec!.containers[0]!;
    assert.deepEqual(c.lifecycle, { preStop: { sleep: { seconds: 5 } } });
  });

  it("probes MLServer for the model's own readiness, not the server's (ready with no model loaded)", () => {
    const mlserver = {
      ref: "ClusterServingRuntime/mlserver",
      spec: runtimes.find((r) => r.metadata.name === "mlserver")!.spec,
    };
    const probe = (m: ReturnType<typeof model>) =>
      desiredDeployment(planModel(m, mlserver), owner).spec!.template.spec!.containers[0]!.readinessProbe
        ?.httpGet;
    assert.deepEqual(probe(model({ model: { uri: "s3://b/iris.tgz", format: "sklearn" } }, "iris")), {
      path: "/v2/models/iris/ready",
      port: "rest",
    });
    assert.deepEqual(
      probe(model({ model: { uri: "s3://b/iris.tgz", format: "sklearn", name: "classifier" } }, "iris")),
      { path: "/v2/models/classifier/ready", port: "rest" },
      "spec.model.name is the name MLServer serves it under",
    );
  });

  it("leaves replicas to the autoscaler when autoscaling is set", () => {
    const plan = planModel(
      model({ model: { path: "/m" }, image: "me/s:1", autoscaling: { minReplicas: 2, maxReplicas: 5 } }),
      { ref: "custom" },
    );
    const scaled = { status: { lastScaleTime: new Date(), desiredReplicas: 2 } };
    assert.equal("replicas" in desiredDeployment(plan, owner, { autoscaler: scaled }).spec!, false);
    const hpa = desiredAutoscaler(plan, owner)!;
    assert.deepEqual([hpa.spec?.minReplicas, hpa.spec?.maxReplicas], [2, 5]);
    assert.equal(desiredAutoscaler(planModel(model(spec), tf), owner), undefined);
  });

  it("exposes named rest and grpc ports on the requested Service type", () => {
    const plan = planModel(
      model({ ...spec, endpoint: { serviceType: "NodePort", restPort: 8500, grpcPort: 9000 } }),
      tf,
    );
    const svc = desiredService(plan, owner);
    assert.equal(svc.spec?.type, "NodePort");
    assert.deepEqual(
      svc.spec?.ports?.map((p) => [p.name, p.port, p.targetPort]),
      [
        ["rest", 8500, "rest"],
        ["grpc", 9000, "grpc"],
      ],
    );
  });

  it("uses the model config file arguments when a ConfigMap is given", () => {
    const plan = planModel(
      model({
        runtime: "tensorflow-serving",
        model: { name: "resnet", configMapRef: { name: "cfg", key: "models.config" } },
      }),
      tf,
    );
    const c = desiredDeployment(plan, owner).spec!.template.spec!.containers[0]!;
    assert.ok(c.args?.includes("--model_config_file=$(MODEL_CONFIG_FILE)"));
    assert.ok(!c.args?.some((a) => a.startsWith("--model_base_path")));
    assert.ok(
      c.env?.some(
        (e) => e.name === "MODEL_CONFIG_FILE" && e.value === "/etc/mlmodel/model-config/models.config",
      ),
    );
  });

  it("changes the serving revision with the pod template only", () => {
    const a = servingPodTemplate(planModel(model(spec), tf)).revision;
    assert.equal(servingPodTemplate(planModel(model({ ...spec, replicas: 5 }), tf)).revision, a);
    assert.notEqual(servingPodTemplate(planModel(model({ ...spec, image: "other:1" }), tf)).revision, a);
  });

  it("rejects a name that cannot name a Service, saying why", () => {
    assert.throws(
      () => planModel(model({ model: { uri: "s3://b/m" } }, "v1.2"), tf),
      (err: unknown) =>
        err instanceof PlanError && err.reason === "InvalidName" && /no dots/.test(err.message),
    );
  });

  it("fails clearly when gRPC is asked of a custom image without a gRPC port", () => {
    assert.throws(
      () =>
        planModel(model({ model: { path: "/m" }, image: "me/s:1", endpoint: { protocol: "gRPC" } }), {
          ref: "custom",
        }),
      (err: unknown) => err instanceof PlanError && /grpcPort/.test(err.message),
    );
  });
});
