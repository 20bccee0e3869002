/**
 * The real node's network on the host: a bridge of our own with the node's address, guard
 * rules that keep pod traffic on this machine and off the host's services, and the removal at
 * `down` of the iptables chains that kubelet, kube-proxy, CNI and we added (in iptables and
 * ip6tables; chains of those names that existed before the node stay), and of the nf_tables
 * tables that only they had created.
 *
 * The plans (what rules to add, what to delete) are pure functions of iptables-save's output
 * so that unit tests can check them; the glue runs iptables-restore with them.
 */
import type { Server } from "node:net";
import { clusterNetwork } from "../network.ts";
import { podReachableHostPorts, realNodeDefaults } from "./config.ts";
import { run, runChecked, writeSysctl } from "./host.ts";

/** Chains whose name starts with one of these belong to the node's components or to us. */
export const nodeChainPattern = /^(KUBE-|CNI-|MLMODEL-)/;

/** Chains of our own prefix: always the node's. */
const ownChainPattern = new RegExp(`^${realNodeDefaults.chainPrefix}`);

export interface GuardOptions {
  bridge: string;
  podCidr: string;
  apiserverPort: number;
  /** The kubelet ports listening on this machine (none when every kubelet is in a namespace of its own). */
  kubeletPorts: number[];
}

/** An iptables port range, `first:last`. */
const portRange = (range: { first: number; last: number }) => `${range.first}:${range.last}`;

/**
 * What pods may reach on this machine through the bridge: replies to connections the host
 * opened, the API server, the kubelet(s), NodePorts and the host services of
 * `podReachableHostPorts` (TCP and UDP). Everything else that arrives on the bridge is dropped,
 * so a host service listening on every address stays out of the pods' reach.
 */
export function bridgeInputRules(chain: string, options: GuardOptions): string[] {
  const from = `-A ${chain} -i ${options.bridge}`;
  const tcpPorts = [options.apiserverPort, ...options.kubeletPorts];
  const ranges = [podReachableHostPorts.nodePorts, podReachableHostPorts.hostServices].map(portRange);
  return [
    `${from} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN`,
    ...tcpPorts.map((port) => `${from} -p tcp -m tcp --dport ${port} -j RETURN`),
    ...ranges.flatMap((range) =>
      ["tcp", "udp"].map((protocol) => `${from} -p ${protocol} -m ${protocol} --dport ${range} -j RETURN`),
    ),
    `${from} -j DROP`,
  ];
}

/**
 * Guard rules, as iptables-restore input (with --noflush). They live in chains of our own,
 * jumped to from the top of the built-in chains:
 * - mangle FORWARD: nothing is forwarded between our bridge and any other interface, so a pod
 *   can never reach past this machine (pods also have no default route: see cniConfig);
 * - mangle POSTROUTING: packets still addressed to the Service range (no kube-proxy rule
 *   translated them) or to kwok's invented addresses would follow the default route off the
 *   machine; they are dropped;
 * - filter INPUT: from the bridge, only what `bridgeInputRules` allows; the API server
 *   listens on every address (pods reach it on the bridge), but only loopback and the bridge
 *   may talk to it, and to the node's own address.
 */
export function guardRules(family: 4 | 6, options: GuardOptions): string {
  const p = realNodeDefaults.chainPrefix;
  const lines: string[] = [];
  if (family === 4) {
    lines.push(
      "*mangle",
      `:${p}FORWARD - [0:0]`,
      `:${p}POSTROUTING - [0:0]`,
      `-I FORWARD 1 -j ${p}FORWARD`,
      `-A ${p}FORWARD -i ${options.bridge} ! -o ${options.bridge} -j DROP`,
      `-A ${p}FORWARD ! -i ${options.bridge} -o ${options.bridge} -j DROP`,
      `-I POSTROUTING 1 -j ${p}POSTROUTING`,
      ...[clusterNetwork.serviceCidr, clusterNetwork.kwokPodCidr, `${clusterNetwork.kwokNodeIp}/32`].map(
        (cidr) => `-A ${p}POSTROUTING -d ${cidr} -j DROP`,
      ),
      "COMMIT",
    );
  }
  lines.push(
    "*filter",
    `:${p}INPUT - [0:0]`,
    `-I INPUT 1 -j ${p}INPUT`,
    `-A ${p}INPUT -i lo -j RETURN`,
    ...(family === 4
      ? [...bridgeInputRules(`${p}INPUT`, options), `-A ${p}INPUT -d ${options.podCidr} -j DROP`]
      : []),
    `-A ${p}INPUT -p tcp -m tcp --dport ${options.apiserverPort} -j DROP`,
    "COMMIT",
  );
  return `${lines.join("\n")}\n`;
}

interface SavedRule {
  table: string;
  chain: string;
  /** The rule's text after `-A CHAIN `. */
  spec: string;
  target?: string;
}

interface SavedTables {
  tables: Map<string, { chains: string[]; rules: SavedRule[] }>;
}

export function parseIptablesSave(text: string): SavedTables {
  const tables = new Map<string, { chains: string[]; rules: SavedRule[] }>();
  let current: { chains: string[]; rules: SavedRule[] } | undefined;
  let table = "";
  for (const line of text.split("\n")) {
    if (line.startsWith("*")) {
      table = line.slice(1).trim();
      current = { chains: [], rules: [] };
      tables.set(table, current);
    } else if (line.startsWith(":") && current) {
      current.chains.push(line.slice(1).split(" ")[0]!);
    } else if (line.startsWith("-A ") && current) {
      const [, chain, ...rest] = line.split(" ");
      const spec = rest.join(" ");
      const target = /(?:^| )-[jg] (\S+)/.exec(spec)?.[1];
      current.rules.push({ table, chain: chain!, spec, target });
    }
  }
  return { tables };
}

/** The chains matching `pattern` in iptables-save's output, each as `<table> <chain>`. */
export function matchingChains(saved: string, pattern: RegExp = nodeChainPattern): string[] {
  return [...parseIptablesSave(saved).tables].flatMap(([table, { chains }]) =>
    chains.filter((chain) => pattern.test(chain)).map((chain) => `${table} ${chain}`),
  );
}

/**
 * iptables-restore --noflush input that deletes every chain matching `pattern` except those
 * in `keep` (`<table> <chain>`: what existed before the node), and every rule elsewhere that
 * jumps to a deleted one; empty when there is nothing to delete.
 */
export function removalPlan(
  saved: string,
  pattern: RegExp = nodeChainPattern,
  keep: ReadonlySet<string> = new Set(),
): string {
  const out: string[] = [];
  for (const [table, { chains, rules }] of parseIptablesSave(saved).tables) {
    const ours = (chain: string) => pattern.test(chain) && !keep.has(`${table} ${chain}`);
    const doomed = chains.filter(ours);
    const jumps = rules.filter((r) => !ours(r.chain) && r.target && ours(r.target));
    if (doomed.length === 0 && jumps.length === 0) continue;
    out.push(`*${table}`);
    for (const rule of jumps) out.push(`-D ${rule.chain} ${rule.spec}`);
    for (const chain of doomed) out.push(`-F ${chain}`);
    for (const chain of doomed) out.push(`-X ${chain}`);
    out.push("COMMIT");
  }
  return out.length ? `${out.join("\n")}\n` : "";
}

const tools = {
  4: { save: "iptables-save", restore: "iptables-restore" },
  6: { save: "ip6tables-save", restore: "ip6tables-restore" },
};

/**
 * The chains of kubelet's, kube-proxy's and CNI's names that exist before the node starts,
 * per family (another Kubernetes on this machine, say): `down` leaves them. Our own prefix
 * is never kept. Undefined where iptables-save cannot run.
 */
export type ChainsBefore = Partial<Record<"4" | "6", string[]>>;

export const keptChains = (chains: string[]) =>
  chains.filter((entry) => !entry.split(" ")[1]?.startsWith(realNodeDefaults.chainPrefix));

export async function recordChains(): Promise<ChainsBefore> {
  const before: ChainsBefore = {};
  for (const family of [4, 6] as const) {
    const saved = await run(tools[family].save, []);
    if (saved.code === 0) before[family] = keptChains(matchingChains(saved.stdout));
  }
  return before;
}

export async function installGuard(options: GuardOptions): Promise<void> {
  for (const family of [4, 6] as const) {
    await runChecked(tools[family].restore, ["--noflush", "--wait=5"], guardRules(family, options));
  }
}

/**
 * Removes the chains the node made (and the jumps to them) from both families, leaving those
 * `before` lists. A family with no record keeps every chain but our own prefix's (whether
 * kubelet's and kube-proxy's existed before cannot be told), and says so. Returns what it
 * could not remove or left.
 */
export async function removeNodeChains(before: ChainsBefore): Promise<string[]> {
  const problems: string[] = [];
  for (const family of [4, 6] as const) {
    const recorded = before[family];
    const pattern = recorded ? nodeChainPattern : ownChainPattern;
    const keep = new Set(keptChains(recorded ?? []));
    // kube-proxy or kubelet may still be rewriting rules as they stop: try a few times.
    for (let attempt = 0; attempt < 3; attempt++) {
      const saved = await run(tools[family].save, []);
      if (saved.code !== 0) break;
      const plan = removalPlan(saved.stdout, pattern, keep);
      if (!plan) break;
      const result = await run(tools[family].restore, ["--noflush", "--wait=5"], { input: plan });
      if (result.code === 0) continue;
      if (attempt === 2)
        problems.push(`${tools[family].restore} could not remove the node's chains: ${result.stderr.trim()}`);
    }
    if (!recorded) {
      const saved = await run(tools[family].save, []);
      const left = saved.code === 0 ? matchingChains(saved.stdout) : [];
      if (left.length)
        problems.push(
          `left ${left.length} IPv${family} chains in place (${left.slice(0, 5).join(", ")}${left.length > 5 ? ", ..." : ""}): the journal does not record which existed before the node; remove them by hand if they are its`,
        );
    }
  }
  return problems;
}

// --- nf_tables tables ----------------------------------------------------------------------

/** `nft list tables` -> ["ip filter", "ip6 nat", ...]. */
export function parseNftTables(text: string): string[] {
  return text
    .split("\n")
    .map((line) => /^table (\S+ \S+)/.exec(line.trim())?.[1])
    .filter((t): t is string => Boolean(t));
}

/** True when `nft list table` shows only base chains with their policies and no rule. */
export function isEmptyNftTable(listing: string): boolean {
  return listing
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean)
    .every((line) => /^(table |chain |type .* policy accept;$|}$)/.test(line));
}

export async function nftTables(): Promise<string[] | undefined> {
  const result = await run("nft", ["list", "tables"]);
  return result.code === 0 ? parseNftTables(result.stdout) : undefined;
}

/** Deletes the nf_tables tables that did not exist before the node and are empty now. */
export async function removeNewEmptyNftTables(before: string[] | undefined): Promise<void> {
  if (!before) return;
  for (const table of (await nftTables()) ?? []) {
    if (before.includes(table)) continue;
    const listing = await run("nft", ["list", "table", ...table.split(" ")]);
    if (listing.code === 0 && isEmptyNftTable(listing.stdout))
      await run("nft", ["delete", "table", ...table.split(" ")]);
  }
}

// --- host services for pods ----------------------------------------------------------------

/**
 * Binds `server` on `host` (the bridge address) at a port of
 * `podReachableHostPorts.hostServices`, the one range of this machine's own ports that pods
 * may reach besides the API server's and kubelet's; resolves with the port. Ports in use are
 * skipped (from a random start, so that servers started at once rarely meet).
 */
export async function listenForPods(server: Server, host: string): Promise<number> {
  const { first, last } = podReachableHostPorts.hostServices;
  const size = last - first + 1;
  const start = Math.floor(Math.random() * size);
  for (let i = 0; i < size; i++) {
    const port = first + ((start + i) % size);
    const bound = await new Promise<boolean>((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException) => {
        server.off("listening", onListening);
        if (err.code === "EADDRINUSE") resolve(false);
        else reject(err);
      };
      const onListening = () => {
        server.off("error", onError);
        resolve(true);
      };
      server.once("error", onError);
      server.once("listening", onListening);
      server.listen(port, host);
    });
    if (bound) return port;
  }
  throw new Error(`every port of ${first}-${last} on ${host} is in use: no port left that pods may reach`);
}

// --- the bridge ----------------------------------------------------------------------------

export async function linkExists(name: string): Promise<boolean> {
  return (await run("ip", ["link", "show", "dev", name])).code === 0;
}

/** Creates the bridge with the node's address (prefix from the pod CIDR), IPv4 only. */
export async function createBridge(name: string, nodeIp: string, podCidr: string): Promise<void> {
  const prefix = podCidr.split("/")[1];
  await runChecked("ip", ["link", "add", name, "type", "bridge"]);
  // No IPv6 on the bridge: no link-local address, no router solicitations; pods are IPv4.
  await writeSysctl(`net.ipv6.conf.${name}.disable_ipv6`, "1").catch(() => {});
  await runChecked("ip", ["addr", "add", `${nodeIp}/${prefix}`, "dev", name]);
  await runChecked("ip", ["link", "set", name, "up"]);
}

/** Deletes the bridge and whatever veth is still attached to it. */
export async function deleteBridge(name: string): Promise<void> {
  if (!(await linkExists(name))) return;
  const ports = await run("ip", ["-o", "link", "show", "master", name]);
  for (const line of ports.stdout.split("\n")) {
    const port = /^\d+: ([^:@]+)/.exec(line)?.[1];
    if (port) await run("ip", ["link", "del", port]);
  }
  await run("ip", ["link", "del", name]);
}

// --- the node network of a multi-node cluster ------------------------------------------------

export interface NetworkMember {
  nodeIp: string;
  podCidr: string;
  hostVeth: string;
  /** A file the node's network namespace is bind-mounted on (its lifetime is that mount's). */
  netns: string;
}

/**
 * The commands, run inside one node's namespace, that give it its address, its loopback, IP
 * forwarding (pod traffic to and from other nodes passes through it) and a route to each other
 * node's pods. No default route: nothing the node or its pods send can leave this machine.
 */
export function memberNetworkScript(member: NetworkMember, others: NetworkMember[], prefix: string): string {
  return [
    "ip link set lo up",
    `ip addr add ${member.nodeIp}/${prefix} dev eth0`,
    "ip link set eth0 up",
    "echo 1 > /proc/sys/net/ipv4/ip_forward",
    "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6",
    ...others.map((other) => `ip route add ${other.podCidr} via ${other.nodeIp} dev eth0`),
  ].join("\n");
}

/**
 * The host's bridge (with the host's address on the node network), one network namespace per
 * node joined to it by a veth pair, and on the host a route to each node's pods through it.
 */
export async function createNodeNetwork(
  hostBridge: string,
  hostIp: string,
  nodeNetwork: string,
  members: NetworkMember[],
): Promise<void> {
  const prefix = nodeNetwork.split("/")[1]!;
  await createBridge(hostBridge, hostIp, nodeNetwork);
  for (const member of members) {
    await runChecked("unshare", [`--net=${member.netns}`, "true"]);
    await runChecked("ip", [
      "link",
      "add",
      member.hostVeth,
      "type",
      "veth",
      "peer",
      "name",
      "eth0",
      "netns",
      member.netns,
    ]);
    await writeSysctl(`net.ipv6.conf.${member.hostVeth}.disable_ipv6`, "1").catch(() => {});
    await runChecked("ip", ["link", "set", member.hostVeth, "master", hostBridge, "up"]);
    const others = members.filter((m) => m !== member);
    await runChecked("nsenter", [
      `--net=${member.netns}`,
      "sh",
      "-ec",
      memberNetworkScript(member, others, prefix),
    ]);
    await runChecked("ip", ["route", "add", member.podCidr, "via", member.nodeIp, "dev", hostBridge]);
  }
}

/**
 * Cuts a node off the node network (its veth's host end down): the control plane, the other
 * nodes and the host no longer reach it, nor it them, while its processes keep running.
 */
export async function setMemberLink(hostVeth: string, up: boolean): Promise<void> {
  await runChecked("ip", ["link", "set", hostVeth, up ? "up" : "down"]);
}

/** Whether a node's veth is up on the host's side (a partitioned node's is down). */
export async function memberLinkUp(hostVeth: string): Promise<boolean> {
  const shown = await run("ip", ["-o", "link", "show", "dev", hostVeth]);
  return shown.code === 0 && /[<,]UP[,>]/.test(shown.stdout);
}
