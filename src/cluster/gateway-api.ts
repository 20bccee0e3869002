/**
 * The Gateway API's standard-channel CRDs (HTTPRoute, Gateway, ...) in the local control plane,
 * for tests of traffic routing (a canary's HTTPRoute weights). Opt-in: `mlmodel cluster up
 * --gateway-api`, or installGatewayApiCrds() from a test.
 *
 * The manifests come from the sigs.k8s.io/gateway-api Go module itself (config/crd/standard),
 * fetched with `go mod download` through the Go module proxy into Go's module cache: the same
 * route, and the same cache, as the control plane's binaries (no other download site is
 * reachable from our machines). Nothing is committed; a second install reads the cache.
 *
 * Version: v1.6.3, the last patch of the release line built against k8s.io/* v0.36 (Kubernetes
 * 1.36, our control plane's minor); v1.7 moved to v0.37 (Kubernetes 1.37). Its standard
 * channel serves HTTPRoute as gateway.networking.k8s.io/v1.
 */
import { spawn } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ApiextensionsV1Api,
  KubeConfig,
  type KubernetesObject,
  KubernetesObjectApi,
  PatchStrategy,
} from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { checkGoToolchain, type ProgressFn } from "./binaries.ts";
import { ClusterError } from "./errors.ts";

export const gatewayApiModule = "sigs.k8s.io/gateway-api";
export const gatewayApiVersion = "v1.6.3";
const fieldManager = "mlmodel-cluster";

/** `go mod download -json` of the module: its directory in Go's module cache. */
async function downloadModule(progress: ProgressFn): Promise<string> {
  checkGoToolchain();
  const target = `${gatewayApiModule}@${gatewayApiVersion}`;
  progress(`fetching ${target} (Go module proxy, cached in Go's module cache)`);
  // Outside any module (the repo's go.mod files must not matter), with the local toolchain.
  const env = { ...process.env, GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod", GO111MODULE: "on" };
  const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
    (resolve, reject) => {
      const child = spawn("go", ["mod", "download", "-json", target], { cwd: tmpdir(), env });
      let out = "";
      let err = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr.on("data", (d: Buffer) => (err += d.toString()));
      child.on("error", reject);
      child.on("close", (c) => resolve({ code: c, stdout: out, stderr: err }));
    },
  );
  let info: { Dir?: string; Error?: string } = {};
  try {
    info = JSON.parse(stdout) as typeof info;
  } catch {
    // Reported below with stderr.
  }
  if (code !== 0 || !info.Dir) {
    throw new ClusterError(
      `could not download ${target} with \`go mod download\`: ${info.Error ?? (stderr.trim() || `exit code ${code}`)}`,
    );
  }
  return info.Dir;
}

/** The standard channel's manifests (CRDs, and the policy that guards their upgrades), in order. */
export async function gatewayApiManifests(progress: ProgressFn = () => {}): Promise<KubernetesObject[]> {
  const dir = join(await downloadModule(progress), "config", "crd", "standard");
  const files = (await readdir(dir)).filter((f) => f.endsWith(".yaml")).sort();
  const objects: KubernetesObject[] = [];
  for (const file of files) {
    for (const doc of parseAllDocuments(await readFile(join(dir, file), "utf8"))) {
      const obj = doc.toJS() as KubernetesObject | null;
      if (obj?.kind) objects.push(obj);
    }
  }
  return objects;
}

async function waitEstablished(api: ApiextensionsV1Api, names: string[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (const name of names) {
    for (;;) {
      const crd = await api.readCustomResourceDefinition({ name });
      if (crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) break;
      if (Date.now() > deadline)
        throw new ClusterError(`CustomResourceDefinition ${name} was not Established after 60 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/**
 * Applies the Gateway API's standard-channel CRDs to the cluster of `kubeconfig` (server-side
 * apply, so running it again changes nothing) and waits until each is Established. Returns the
 * CRD names.
 */
export async function installGatewayApiCrds(
  kubeconfig: string,
  progress: ProgressFn = () => {},
): Promise<{ version: string; crds: string[] }> {
  const objects = await gatewayApiManifests(progress);
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  const client = KubernetesObjectApi.makeApiClient(kc);
  for (const obj of objects) {
    await client.patch(obj, undefined, undefined, fieldManager, true, PatchStrategy.ServerSideApply);
  }
  const crds = objects.filter((o) => o.kind === "CustomResourceDefinition").map((o) => o.metadata!.name!);
  await waitEstablished(kc.makeApiClient(ApiextensionsV1Api), crds);
  progress(`Gateway API ${gatewayApiVersion} (standard channel): ${crds.length} CRDs Established`);
  return { version: gatewayApiVersion, crds };
}
