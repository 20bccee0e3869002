/**
 * The Helm chart: `helm lint` and `helm template` pass, each value changes what it says, bad
 * values fail naming the field, and every rendered object is accepted by the real API server
 * (server-side dry run, with the restricted Pod Security level enforced on the namespace).
 */
// test-needs: helm
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { managerDeployment, runtimeObjects } from "../../../scripts/gen-install.ts";
import { install } from "../../../src/install/install.ts";
import { rulesFor } from "../../../src/install/manifests.ts";
import { admissionPolicies, policySpec } from "../../../src/install/policies.ts";
import { operatorAccess } from "../../../src/operator/access.ts";
import { builtinKinds, KubeClient, type KubeObject } from "../../../src/runtime/index.ts";
import { createNamespace, kubeConfig, type TestNamespace, waitFor } from "../../harness/cluster.ts";
import { scratchDir } from "../../harness/scratch.ts";
import { helm, kubeVersion } from "./helm.ts";
import { kubectl, parseYamlStream } from "./support.ts";

const chart = "deploy/helm/mlmodel-operator";

// biome-ignore lint/suspicious/noExplicitAny: assertions read nested fields of rendered objects.
type Obj = KubeObject & { spec?: any; rules?: any };

function render(args: string[] = [], namespace = "mlmodel-system"): Obj[] {
  const r = helm(["template", "rel", chart, "-n", namespace, "--kube-version", kubeVersion, ...args]);
  assert.equal(r.status, 0, r.stderr);
  return parseYamlStream(r.stdout) as Obj[];
}

/** The node cache's objects (templates/node-cache.yaml) are found by name only: the checks below are the manager's. */
const isNodeCache = (o: Obj) => /node-cache/.test(o.metadata.name ?? "");
const find = (objects: Obj[], kind: string, name?: string) =>
  objects.filter((o) => o.kind === kind && (name ? o.metadata.name === name : !isNodeCache(o)));
const managerOf = (objects: Obj[]) => find(objects, "Deployment")[0]!.spec.template.spec.containers[0];

describe("Helm chart deploy/helm/mlmodel-operator", () => {
  it("passes helm lint --strict", () => {
    const r = helm(["lint", "--strict", chart, "--kube-version", kubeVersion]);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  it("renders by default what dist/install.yaml installs: derived RBAC, 2 leader-elected restricted replicas, runtimes", () => {
    const objects = render();
    const role = find(objects, "ClusterRole")[0]!;
    assert.deepEqual(role.rules, rulesFor(operatorAccess));
    const deployment = find(objects, "Deployment")[0]!;
    assert.equal(deployment.spec.replicas, 2);
    // biome-ignore lint/suspicious/noExplicitAny: a literal Deployment.
    const expected = (managerDeployment() as any).spec.template.spec;
    const pod = deployment.spec.template.spec;
    assert.deepEqual(pod.securityContext, expected.securityContext);
    const [c, e] = [pod.containers[0], expected.containers[0]];
    for (const field of [
      "securityContext",
      "livenessProbe",
      "readinessProbe",
      "resources",
      "env",
      "volumeMounts",
    ]) {
      assert.deepEqual(c[field], e[field], field);
    }
    assert.equal(c.image, "ghcr.io/mlmodel-operator/mlmodel:0.1.0");
    assert.ok(c.args.includes("--leader-elect"));
    assert.deepEqual(
      find(objects, "ClusterServingRuntime").map((r) => r.spec),
      runtimeObjects()
        .sort((a, b) => a.metadata.name!.localeCompare(b.metadata.name!))
        .map((r) => (r as Obj).spec),
    );
    assert.equal(find(objects, "Service", "rel-mlmodel-operator-metrics").length, 1);
    assert.equal(find(objects, "ServiceMonitor").length, 0, "ServiceMonitor is opt-in");
  });

  it("renders the install's admission policies, matching the release's ServiceAccount", () => {
    const objects = render([], "ops");
    const policies = find(objects, "ValidatingAdmissionPolicy");
    assert.deepEqual(
      policies.map((p) => p.metadata.name),
      admissionPolicies.map((p) => `rel-mlmodel-operator-${p.suffix}`),
    );
    for (const [i, policy] of admissionPolicies.entries())
      assert.deepEqual(
        policies[i]!.spec,
        policySpec(policy, "system:serviceaccount:ops:rel-mlmodel-operator"),
        policy.suffix,
      );
    assert.deepEqual(
      find(objects, "ValidatingAdmissionPolicyBinding").map((b) => [
        b.spec.policyName,
        b.spec.validationActions,
      ]),
      policies.map((p) => [p.metadata.name, ["Deny"]]),
    );
  });

  const cases: { name: string; set: string[]; check: (objects: Obj[]) => void }[] = [
    {
      name: "image and replicas",
      set: ["image.repository=registry.example.com/ml/mlmodel", "image.tag=1.2.3", "replicas=3"],
      check: (o) => {
        assert.equal(find(o, "Deployment")[0]!.spec.replicas, 3);
        assert.equal(managerOf(o).image, "registry.example.com/ml/mlmodel:1.2.3");
        assert.ok(managerOf(o).args.includes("--downloader-image=registry.example.com/ml/mlmodel:1.2.3"));
      },
    },
    {
      name: "watched namespaces: flags, and namespaced rights per namespace only",
      set: ["watchNamespaces={team-a,team-b}"],
      check: (o) => {
        const args: string[] = managerOf(o).args;
        assert.deepEqual(
          args.filter((a) => a.startsWith("--namespace=")),
          ["--namespace=team-a", "--namespace=team-b"],
        );
        const clusterRules = find(o, "ClusterRole")[0]!.rules;
        assert.deepEqual(
          clusterRules.flatMap((r: { resources: string[] }) => r.resources),
          ["clusterservingruntimes"],
        );
        const roles = find(o, "Role").filter((r) => r.metadata.namespace?.startsWith("team-"));
        assert.deepEqual(roles.map((r) => r.metadata.namespace).sort(), ["team-a", "team-b"]);
        assert.equal(
          find(o, "RoleBinding").filter((r) => r.metadata.namespace?.startsWith("team-")).length,
          2,
        );
      },
    },
    {
      name: "log level and format",
      set: ["logLevel=debug", "logFormat=text"],
      check: (o) => {
        assert.ok(managerOf(o).args.includes("--log-level=debug"));
        assert.ok(managerOf(o).args.includes("--log-format=text"));
      },
    },
    {
      name: "resources",
      set: ["resources.requests.cpu=250m", "resources.limits.memory=1Gi"],
      check: (o) => {
        assert.equal(managerOf(o).resources.requests.cpu, "250m");
        assert.equal(managerOf(o).resources.limits.memory, "1Gi");
      },
    },
    {
      name: "metrics off: no Service, no port, metrics server disabled",
      set: ["metrics.enabled=false"],
      check: (o) => {
        assert.equal(find(o, "Service").length, 0);
        assert.ok(managerOf(o).args.includes("--metrics-bind-address=0"));
        assert.ok(!managerOf(o).ports.some((p: { name: string }) => p.name === "metrics"));
      },
    },
    {
      name: "metrics port and ServiceMonitor",
      set: [
        "metrics.port=9090",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
      ],
      check: (o) => {
        assert.ok(managerOf(o).args.includes("--metrics-bind-address=:9090"));
        const monitor = find(o, "ServiceMonitor")[0]!;
        assert.equal(monitor.metadata.labels?.release, "prom");
        assert.equal(monitor.spec.endpoints[0].port, "metrics");
        assert.equal(find(o, "Service")[0]!.spec.ports[0].port, 9090);
      },
    },
    {
      name: "node cache: on by default with its budget, the operator's Role to find it either way",
      set: ["nodeCache.budget=20Gi"],
      check: (o) => {
        const agents = find(o, "DaemonSet", "mlmodel-node-cache")[0]!;
        assert.equal(agents.metadata.namespace, "mlmodel-system");
        const pod = agents.spec.template.spec;
        assert.ok(pod.containers[0].args.includes("20Gi"));
        assert.deepEqual(pod.volumes.find((v: { name: string }) => v.name === "cache").emptyDir, {
          sizeLimit: "20Gi",
        });
        assert.equal(pod.containers[0].image, managerOf(o).image, "the agents run the operator's image");
        assert.equal(find(o, "Service", "mlmodel-node-cache")[0]!.spec.internalTrafficPolicy, "Local");
        const off = render(["--set", "nodeCache.enabled=false"]);
        assert.equal(off.filter((x) => x.kind === "DaemonSet").length, 0);
        assert.equal(find(off, "Role", "rel-mlmodel-operator-node-cache").length, 1);
      },
    },
    {
      name: "leader election off: no flag, no Lease Role",
      set: ["leaderElection.enabled=false", "replicas=1"],
      check: (o) => {
        assert.ok(!managerOf(o).args.includes("--leader-elect"));
        assert.equal(find(o, "Role").length, 0);
        assert.equal(find(o, "PodDisruptionBudget").length, 0, "no PDB for one replica");
      },
    },
    {
      name: "extra runtimes, built-in ones off",
      set: [
        "builtinRuntimes.enabled=false",
        "extraRuntimes[0].name=vllm",
        "extraRuntimes[0].spec.image=vllm/vllm-openai:v0.6.0",
        "extraRuntimes[0].spec.supportedModelFormats[0].name=vllm",
        "extraRuntimes[0].spec.protocols[0]=REST",
        "extraRuntimes[0].spec.restPort=8000",
      ],
      check: (o) => {
        const runtimes = find(o, "ClusterServingRuntime");
        assert.deepEqual(
          runtimes.map((r) => r.metadata.name),
          ["vllm"],
        );
        assert.equal(runtimes[0]!.spec.image, "vllm/vllm-openai:v0.6.0");
      },
    },
  ];
  for (const c of cases) {
    it(`value: ${c.name}`, () => c.check(render(c.set.flatMap((s) => ["--set", s]))));
  }

  it("refuses bad values, naming the field and what is allowed", () => {
    const bad: [string, RegExp][] = [
      ["replicas=0", /\/replicas': minimum: got 0, want 1/],
      ["logLevel=loud", /\/logLevel': value must be one of 'trace', 'debug', 'info', 'warn', 'error'/],
      ["logFormat=xml", /\/logFormat': value must be one of 'json', 'text'/],
      ["watchNamespaces={Team_A}", /\/watchNamespaces\/0'/],
      ["metrics.port=80", /\/metrics\/port': minimum: got 80, want 1,?024/],
      ["replica=2", /additional properties 'replica' not allowed/],
    ];
    for (const [set, message] of bad) {
      const r = helm(["template", "rel", chart, "--kube-version", kubeVersion, "--set", set]);
      assert.notEqual(r.status, 0, set);
      assert.match(r.stderr, message, set);
    }
  });

  describe("on the real API server", () => {
    let ns: TestNamespace;
    let other: TestNamespace;

    before(async () => {
      ns = await createNamespace("e2e-helm", { podSecurity: "restricted" });
      other = await createNamespace("e2e-helm-watched");
      const admin = KubeClient.fromKubeConfig(kubeConfig());
      // CRDs as `helm install` puts them first (crds/ holds the same generated CRDs).
      await install(admin);
      // A stand-in for the Prometheus Operator's ServiceMonitor CRD, so its object can be checked too.
      await admin.apply(
        builtinKinds.CustomResourceDefinition,
        {
          apiVersion: "apiextensions.k8s.io/v1",
          kind: "CustomResourceDefinition",
          metadata: { name: "servicemonitors.monitoring.coreos.com" },
          spec: {
            group: "monitoring.coreos.com",
            names: {
              kind: "ServiceMonitor",
              plural: "servicemonitors",
              singular: "servicemonitor",
              listKind: "ServiceMonitorList",
            },
            scope: "Namespaced",
            versions: [
              {
                name: "v1",
                served: true,
                storage: true,
                schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } },
              },
            ],
          },
        },
        { fieldManager: "e2e-helm" },
      );
      await waitFor("ServiceMonitor CRD served", async () => {
        const r = await kubectl(process.env.KUBECONFIG!, ["get", "servicemonitors", "-A"]);
        return r.status === 0;
      });
    });

    after(async () => {
      await ns?.delete();
      await other?.delete();
    });

    for (const [label, set] of [
      ["defaults", [] as string[]],
      [
        "every option on",
        [
          "metrics.serviceMonitor.enabled=true",
          "extraRuntimes[0].name=e2e-helm-rt",
          "extraRuntimes[0].spec.image=example.com/rt:1",
          "extraRuntimes[0].spec.supportedModelFormats[0].name=custom",
          "extraRuntimes[0].spec.protocols[0]=REST",
          "extraRuntimes[0].spec.restPort=8080",
        ],
      ],
    ] as const) {
      it(`every rendered object passes a server-side dry run (${label})`, async () => {
        const watched = label === "defaults" ? [] : ["--set", `watchNamespaces={${ns.name},${other.name}}`];
        const r = helm([
          "template",
          "rel",
          chart,
          "-n",
          ns.name,
          "--kube-version",
          kubeVersion,
          ...watched,
          ...set.flatMap((s) => ["--set", s]),
        ]);
        assert.equal(r.status, 0, r.stderr);
        const objects = parseYamlStream(r.stdout);
        const file = join(scratchDir("helm"), "rendered.yaml");
        writeFileSync(file, r.stdout);
        const dry = await kubectl(process.env.KUBECONFIG!, [
          "apply",
          "--server-side",
          "--dry-run=server",
          "-f",
          file,
        ]);
        assert.equal(dry.status, 0, dry.stderr);
        for (const o of objects) {
          assert.match(
            dry.stdout,
            new RegExp(`/${o.metadata.name} serverside-applied \\(server dry run\\)`),
            `${o.kind}/${o.metadata.name}`,
          );
        }
        assert.equal(dry.stdout.trim().split("\n").length, objects.length, "one line per object");
        assert.doesNotMatch(dry.stderr, /PodSecurity|violate/, "the manager pods meet the restricted level");
      });
    }
  });
});
