/**
 * A runtime that cannot load its model: its log tail becomes a short, redacted quote
 * (pods.ts, runtimeWords); status names the crash ModelLoadFailed while the revision never
 * served (status.ts); the reconcile reads each crash's log once (mlmodel/crash-logs.ts) and
 * rolls the revision back where a ready one exists.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { V1Deployment, V1Pod } from "@kubernetes/client-node";
import { mlModelKind } from "../../../src/api/kinds.ts";
import type { MLModel, MLModelSpec } from "../../../src/api/mlmodel.ts";
import { operatorAccess } from "../../../src/operator/access.ts";
import { crashLogTail } from "../../../src/operator/mlmodel/crash-logs.ts";
import { planModel } from "../../../src/operator/plan.ts";
import { runtimeWords, runtimeWordsMaxChars } from "../../../src/operator/pods.ts";
import { computeStatus, type Observed } from "../../../src/operator/status.ts";
import { builtinKinds, type KubeObject } from "../../../src/runtime/index.ts";
import { deployment, model, pod, tfServing } from "./fixtures.ts";
import { modelWorld, revisionOf, type World } from "./reconcile-harness.ts";

// MLServer 1.6 failing to load a model whose file is not a pickle: its error, a traceback
// through asyncio and joblib, then a dozen lines of orderly shutdown, and exit code 0.
const mlserverLog = `2026-11-27 21:40:01,101 [mlserver.parallel] DEBUG - Starting response processing loop...
2026-11-27 21:40:01,120 [mlserver.rest] INFO - HTTP server running on http://0.0.0.0:8080
\u001b[32mINFO\u001b[0m:     Started server process [1]
2026-11-27 21:40:02,310 [mlserver] INFO - Couldn't load model 'iris'. Model will be removed from registry.
2026-11-27 21:40:02,311 [mlserver.parallel] ERROR - An error occurred processing a model update of type 'Load'.
Traceback (most recent call last):
  File "/opt/mlserver/lib/python3.11/site-packages/mlserver/parallel/worker.py", line 158, in _process_model_update
    await self._model_registry.load(model_settings)
  File "/opt/mlserver/lib/python3.11/site-packages/mlserver/registry.py", line 293, in load
    return await self._models[model_settings.name].load(model_settings)
  File "/opt/mlserver/lib/python3.11/site-packages/mlserver_sklearn/sklearn.py", line 38, in load
    self._model = joblib.load(model_uri)
                  ^^^^^^^^^^^^^^^^^^^^^^
  File "/opt/mlserver/lib/python3.11/site-packages/joblib/numpy_pickle.py", line 658, in load
    obj = _unpickle(fobj, filename, mmap_mode)
_pickle.UnpicklingError: invalid load key, 't'.
2026-11-27 21:40:02,312 [mlserver] ERROR - Some of the models failed to load during startup!
2026-11-27 21:40:02,313 [mlserver.parallel] INFO - Waiting for shutdown of default inference pool...
2026-11-27 21:40:02,420 [mlserver.parallel] INFO - Shutdown of default inference pool complete
2026-11-27 21:40:02,421 [mlserver.grpc] INFO - Waiting for gRPC server shutdown
2026-11-27 21:40:02,422 [mlserver.grpc] INFO - gRPC server shutdown complete
\u001b[32mINFO\u001b[0m:     10.77.0.1:42788 - "GET /v2/models/iris/ready HTTP/1.1" 404 Not Found
\u001b[32mINFO\u001b[0m:     Shutting down
\u001b[32mINFO\u001b[0m:     Waiting for application shutdown.
\u001b[32mINFO\u001b[0m:     Application shutdown complete.
\u001b[32mINFO\u001b[0m:     Finished server process [1]
`;

describe("runtimeWords: a log tail as a short quote of why the runtime stopped", () => {
  it("picks MLServer's error lines and the exception that ends its traceback, without frames, probes' access lines, timestamps or colours", () => {
    assert.equal(
      runtimeWords(mlserverLog),
      [
        "[mlserver] INFO - Couldn't load model 'iris'. Model will be removed from registry.",
        "[mlserver.parallel] ERROR - An error occurred processing a model update of type 'Load'.",
        "_pickle.UnpicklingError: invalid load key, 't'.",
        "[mlserver] ERROR - Some of the models failed to load during startup!",
      ].join(" | "),
    );
  });

  it("keeps a chained exception's cause and its effect, each once", () => {
    const log = `Traceback (most recent call last):
  File "a.py", line 1, in <module>
FileNotFoundError: [Errno 2] No such file or directory: '/mnt/models/model-v2.joblib'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "b.py", line 2, in load
mlserver.errors.InvalidModelURI: Invalid URI specified for model iris (/mnt/models/model-v2.joblib)
mlserver.errors.InvalidModelURI: Invalid URI specified for model iris (/mnt/models/model-v2.joblib)`;
    assert.equal(
      runtimeWords(log),
      "FileNotFoundError: [Errno 2] No such file or directory: '/mnt/models/model-v2.joblib' | mlserver.errors.InvalidModelURI: Invalid URI specified for model iris (/mnt/models/model-v2.joblib)",
    );
  });

  it("drops a traceback's header behind a log level, as uvicorn logs it", () => {
    const log = `2026-11-27 21:47:01,000 [mlserver] ERROR - Some of the models failed to load during startup!
ERROR:    Traceback (most recent call last):
  File "/opt/mlserver/lib/python3.11/site-packages/starlette/routing.py", line 732, in lifespan
    async with self.lifespan_context(app) as maybe_state:
ModuleNotFoundError: No module named 'mlserver_sklearn.SKLearnModle'`;
    assert.equal(
      runtimeWords(log),
      "[mlserver] ERROR - Some of the models failed to load during startup! | ModuleNotFoundError: No module named 'mlserver_sklearn.SKLearnModle'",
    );
  });

  it("quotes a custom image's plain last lines when none of them reads as an error", () => {
    assert.equal(
      runtimeWords("starting\nreading weights\nweights are version 7, this server reads up to 5\n"),
      "starting | reading weights | weights are version 7, this server reads up to 5",
    );
    assert.equal(runtimeWords(""), "");
    assert.equal(runtimeWords("\n  \n"), "");
  });

  it("redacts credentials in what it quotes: a signed URL's values, a token", () => {
    const words = runtimeWords(
      "ERROR - cannot fetch https://bucket.s3.example.com/m.bin?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=0123456789abcdef\n" +
        "ValueError: bad header for hf_abcdefghijklmnopqrstuvwxyz0123",
    );
    assert.match(words, /X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED/);
    assert.doesNotMatch(words, /AKIAEXAMPLE|0123456789abcdef|hf_abcdefghij/);
    assert.match(words, /ValueError: bad header for REDACTED/);
  });

  it("is bounded: the latest lines first, a single long line cut at its end", () => {
    const many = Array.from(
      { length: 200 },
      (_, i) => `ERROR - step ${i} failed with a long explanation`,
    ).join("\n");
    const words = runtimeWords(many);
    assert.ok(words.length <= runtimeWordsMaxChars, `${words.length} characters`);
    assert.ok(words.endsWith("step 199 failed with a long explanation"), "the last words kept");
    assert.equal(words.split(" | ").length <= 6, true, "a few lines, not the whole tail");
    const long = `ValueError: ${"x".repeat(5000)}`;
    const cut = runtimeWords(long);
    assert.equal(cut.length, runtimeWordsMaxChars);
    assert.ok(cut.startsWith("ValueError: xxx") && cut.endsWith("…"));
    assert.equal(runtimeWords(long, 40).length, 40);
  });
});

/** A serving pod of `revision` whose container `server` waits in CrashLoopBackOff after `exit`. */
function crashed(
  name: string,
  revision: string,
  exit: { exitCode: number; reason?: string; message?: string },
  restarts = 3,
): V1Pod {
  const p = pod(name, revision, { waiting: "CrashLoopBackOff" });
  const cs = p.status!.containerStatuses![0]!;
  cs.restartCount = restarts;
  cs.lastState = { terminated: { ...exit } };
  p.metadata!.uid = `uid-${name}`;
  return p;
}

const tf = { ref: "ClusterServingRuntime/tensorflow-serving", spec: tfServing.spec };

/** A downloaded model of one replica whose Deployment has seen its spec and has `pods`. */
function observed(pods: V1Pod[], extra: Partial<Observed> = {}): Observed {
  const m = model({ model: { uri: "s3://b/m", format: "tensorflow" }, replicas: 1 });
  const plan = planModel(m, tf);
  const jobName = plan.source.type === "download" ? plan.source.jobName : "";
  return {
    model: m,
    now: "2026-11-27T21:00:00Z",
    plan,
    revision: "rev1",
    missing: [],
    storage: { status: { phase: "Bound" } },
    job: {
      metadata: { name: jobName },
      status: { succeeded: 1, conditions: [{ type: "Complete", status: "True" }] },
    },
    jobPods: [],
    deployment: deployment(1, 0),
    pods,
    service: { metadata: { name: "resnet" } },
    ...extra,
  };
}

describe("status: a crash loop of a revision that never served is a load failure", () => {
  const words = "ValueError: the model file is not a pickle";

  it("Failed/ModelLoadFailed with the runtime's words, its exit code and where the whole log is", () => {
    const p = crashed("a", "rev1", { exitCode: 0, reason: "Completed" });
    const s = computeStatus(observed([p], { crashWords: new Map([["uid-a/server/3", words]]) }));
    assert.deepEqual([s.phase, s.reason], ["Failed", "ModelLoadFailed"]);
    assert.equal(
      s.message,
      `the runtime cannot load the model: container server of pod a stops before it serves (3 restarts, last exit code 0), saying: ${words}; the whole log: \`kubectl logs a -c server --previous\``,
    );
    assert.equal(s.conditions?.find((c) => c.type === "ServingReady")?.reason, "ModelLoadFailed");
  });

  it("the container's termination message is its words; without any words, the log's command alone", () => {
    const told = crashed("a", "rev1", {
      exitCode: 3,
      reason: "Error",
      message: "weights checksum mismatch\n",
    });
    assert.match(
      computeStatus(observed([told])).message ?? "",
      /last exit code 3\), saying: weights checksum mismatch; the whole log/,
    );
    const silent = crashed("a", "rev1", { exitCode: 1, reason: "Error" });
    assert.match(
      computeStatus(observed([silent])).message ?? "",
      /last exit code 1\); the whole log: `kubectl logs/,
    );
  });

  it("stays a crash loop when the container was killed (OOM, a signal), the revision has served, or a pod of it is ready", () => {
    const oom = crashed("a", "rev1", { exitCode: 137, reason: "OOMKilled" });
    assert.equal(computeStatus(observed([oom])).reason, "CrashLoopBackOff");
    assert.match(computeStatus(observed([oom])).message ?? "", /keeps crashing.*OOMKilled/);
    const exited = crashed("a", "rev1", { exitCode: 0, reason: "Completed" });
    const served = observed([exited]);
    served.model.status = { revision: { current: "rev1", lastReady: "rev1" } };
    assert.equal(computeStatus(served).reason, "CrashLoopBackOff");
    const oneReady = observed([exited, pod("b", "rev1", { ready: true })], { deployment: deployment(2, 1) });
    assert.equal(computeStatus(oneReady).reason, "CrashLoopBackOff");
  });

  it("names the load failure rather than the progress deadline it caused", () => {
    const stuck = deployment(1, 0);
    stuck.spec!.progressDeadlineSeconds = 600;
    stuck.status!.conditions = [{ type: "Progressing", status: "False", reason: "ProgressDeadlineExceeded" }];
    const s = computeStatus(observed([crashed("a", "rev1", { exitCode: 0 })], { deployment: stuck }));
    assert.equal(s.reason, "ModelLoadFailed");
  });
});

describe("the reconcile reads a crashed runtime's log once per crash", () => {
  const image = (tag: string): MLModelSpec => ({ model: {}, image: `registry.local/server:${tag}` });

  /** Reconciles and lets the caches see the writes. */
  async function step(w: World): Promise<void> {
    await w.reconcile();
    w.settle();
  }

  /** The Deployment has seen its spec and has `ready` of its `replicas` ready (settled when equal). */
  function deploymentAt(w: World, ready: number, replicas = 1): void {
    w.update<KubeObject & V1Deployment>(builtinKinds.Deployment, "resnet", (d) => {
      d.metadata.generation = 1;
      d.status = {
        observedGeneration: 1,
        replicas,
        updatedReplicas: replicas,
        readyReplicas: ready,
        availableReplicas: ready,
      };
    });
  }

  /** The Deployment's one pod, of `rev`, waits in CrashLoopBackOff after its `restarts`-th exit. */
  function crashing(
    w: World,
    rev: string,
    restarts: number,
    exit: { exitCode: number; reason?: string; message?: string } = { exitCode: 0, reason: "Completed" },
  ) {
    deploymentAt(w, 0);
    w.put(builtinKinds.Pod, crashed("resnet-x-0", rev, exit, restarts) as KubeObject);
  }

  it("reads the previous log's tail once, quotes it, and reads again only after the next crash", async () => {
    const w: World = modelWorld(image("1"));
    await step(w);
    const rev = revisionOf(image("1"));
    w.client.logs.set("resnet-x-0", mlserverLog);
    crashing(w, rev, 3);
    await step(w);
    assert.deepEqual(w.client.textReads, [
      `Pod/resnet-x-0/log ?container=server&previous=true&tailLines=${crashLogTail.lines}&limitBytes=${crashLogTail.bytes}`,
    ]);
    assert.equal(w.lastStatus()?.reason, "ModelLoadFailed");
    assert.match(w.lastStatus()?.message ?? "", /saying: .*_pickle\.UnpicklingError: invalid load key/);
    await step(w);
    await step(w);
    assert.equal(w.client.textReads.length, 1, "the same crash: not read again");
    crashing(w, rev, 4);
    await step(w);
    assert.equal(w.client.textReads.length, 2, "the next crash: read once more");
  });

  it("reads nothing for a container that wrote a termination message, or one killed", async () => {
    const w: World = modelWorld(image("1"));
    await step(w);
    const rev = revisionOf(image("1"));
    crashing(w, rev, 3, { exitCode: 2, reason: "Error", message: "no weights" });
    await step(w);
    assert.match(w.lastStatus()?.message ?? "", /saying: no weights;/);
    crashing(w, rev, 4, { exitCode: 137, reason: "OOMKilled" });
    await step(w);
    assert.equal(w.lastStatus()?.reason, "CrashLoopBackOff");
    assert.deepEqual(w.client.textReads, []);
  });

  it("a new revision that cannot load is rolled back to the ready one, with the runtime's words", async () => {
    const w: World = modelWorld(image("1"));
    await step(w);
    deploymentAt(w, 1);
    w.put(builtinKinds.Pod, pod("resnet-ready-0", revisionOf(image("1")), { ready: true }) as KubeObject);
    await step(w);
    assert.equal(w.lastStatus()?.phase, "Ready");
    w.update<MLModel>(mlModelKind, "resnet", (m) => {
      m.spec = image("2");
      m.metadata.generation = (m.metadata.generation ?? 1) + 1;
    });
    await step(w);
    w.client.logs.set("resnet-x-0", mlserverLog);
    crashing(w, revisionOf(image("2")), 3);
    deploymentAt(w, 1, 2);
    await step(w);
    assert.equal(w.lastStatus()?.revision?.failed?.reason, "ModelLoadFailed");
    await step(w);
    const rolledBack = w.lastStatus()?.conditions?.find((c) => c.type === "RolledBack");
    assert.equal(rolledBack?.reason, "ModelLoadFailed");
    assert.match(rolledBack?.message ?? "", /invalid load key/);
    assert.equal(w.client.textReads.length, 1);
  });

  it("the operator's access has the one rule the read needs: get pods/log", () => {
    const rules = operatorAccess.filter((a) => a.kind.kind === "Pod" && a.subresource === "log");
    assert.deepEqual(
      rules.map((a) => a.verbs),
      [["get"]],
    );
  });
});
