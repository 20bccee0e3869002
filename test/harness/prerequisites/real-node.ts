/**
 * Prerequisites of the tests that run real pods:
 *   - real-node: what `mlmodel cluster up --real-node` needs (Debian packages, kubelet,
 *     kube-proxy and the provisioner built from Go modules, the node's own images). A file that
 *     declares it runs against the ONE real-node cluster the runner starts for the run
 *     (MLMODEL_TEST_REAL_NODE_DIR, see test/harness/realnode.ts).
 *   - own-real-node: the same installs, for a file that starts real nodes of its own (the
 *     machine-snapshot tests): the runner runs such files after the others, once the run's
 *     real-node cluster has stopped, since one machine hosts one real node at a time.
 *   - images: the project's and MLServer's images, built without a registry (docs/images.md),
 *     so that the cold build (15-25 minutes on 2 cores) happens here, with progress, and not
 *     inside a test's timeout. The run's real node imports them.
 * Each says "unavailable" (its tests are then skipped, with the reason) only where the machine
 * can never have it: not Linux, not root, no overlayfs or writable cgroups, not x86-64.
 * `requiredOn` says which of them CI requires of its machine (MLMODEL_TEST_REQUIRE).
 */
import {
  ensureRealNodePrerequisites,
  realNodePrerequisitesMissing,
  realNodeSupport,
} from "../../../src/cluster/index.ts";
import {
  type MachineKind,
  machineKindProblem,
  thisMachine,
} from "../../../src/cluster/node/prerequisites.ts";
import {
  cachedImage,
  ensureImage,
  ensureImagePrerequisites,
  imageNames,
  imagesMachineProblem,
  imagesSupport,
} from "../../../src/images/index.ts";
import type { CheckResult, Prerequisite } from "./engine.ts";

/**
 * What CI requires (MLMODEL_TEST_REQUIRE) of a machine of this kind: real-node and images
 * wherever the kind of machine can host them (Linux, root, x86-64: the checks' own machine
 * tests), so that such a machine whose kernel or packages cannot host them fails the run
 * instead of skipping every real-pod test. Not the checks themselves: a requirement decided by
 * whether the check passes would never fail.
 */
export function requiredOn(machine: MachineKind = thisMachine()): string[] {
  if (machineKindProblem(machine) !== undefined || machine.arch !== "x64") return [];
  return [realNode.name, images.name];
}

export const realNode: Prerequisite = {
  name: "real-node",
  summary:
    "a real node's Debian packages (containerd, runc, CNI plugins, iptables), local-path-provisioner (cold: ~8 min), then kubelet and kube-proxy once the control plane's Kubernetes build is done, from its compiled packages (2-4 min), and its pause and busybox images",
  async check(): Promise<CheckResult> {
    const support = await realNodeSupport();
    if (!support.ok)
      return { state: "unavailable", reason: `this machine cannot host a real node: ${support.reason}` };
    const missing = await realNodePrerequisitesMissing();
    return missing ? { state: "missing", why: missing } : { state: "ready" };
  },
  install: async (progress) => {
    await ensureRealNodePrerequisites(progress);
  },
  byHand: [
    "as root: npm run prerequisites -- real-node   (apt-get installs containerd runc containernetworking-plugins iptables nftables conntrack; Go builds kubelet, kube-proxy, local-path-provisioner)",
    "or: sudo node src/cli/main.ts cluster up --real-node --dir /tmp/try && node src/cli/main.ts cluster down --dir /tmp/try",
  ].join("\n"),
};

export const ownRealNode: Prerequisite = {
  name: "own-real-node",
  summary: "nothing more than real-node: the file starts real nodes of its own, after the other files",
  requires: ["real-node"],
  check: async () => ({ state: "ready" }),
  install: async () => {},
  byHand: "see real-node",
};

export const images: Prerequisite = {
  name: "images",
  summary: `the images ${imageNames.join(" and ")}, built from Debian, npm and PyPI packages (cold: 15-25 minutes on 2 cores, both at once; an edit under src/ rebuilds only the project layer, ~1 minute)`,
  async check(): Promise<CheckResult> {
    const problem = imagesMachineProblem();
    if (problem) return { state: "unavailable", reason: `cannot build images here: ${problem}` };
    const support = await imagesSupport();
    if (!support.ok) return { state: "missing", why: support.reason };
    for (const name of imageNames)
      if (!(await cachedImage(name)))
        return { state: "missing", why: `image ${name} is not built for this checkout yet` };
    return { state: "ready" };
  },
  install: async (progress) => {
    await ensureImagePrerequisites(progress);
    // The two images share no layer: building them side by side overlaps one's downloads
    // with the other's unpacking (measured: docs/images.md).
    await Promise.all(imageNames.map((name) => ensureImage(name, (line) => progress(`${name}: ${line}`))));
  },
  byHand: "as root: node src/cli/main.ts image build mlmodel && node src/cli/main.ts image build mlserver",
};
