/**
 * Source ports for a load generator on one host, each used once per lap of the machine's
 * ephemeral range.
 *
 * kube-proxy removes a lost endpoint from its rules, but not (for TCP) the connection-tracking
 * entries that point at it. A SYN sent to a pod that can no longer answer (its node cut off the
 * network) leaves an UNREPLIED SYN_SENT entry that the kernel keeps for 120 s
 * (net.netfilter.nf_conntrack_tcp_timeout_syn_sent). A new connection from the same address and
 * source port to the same Service address matches that entry and goes to the lost pod again,
 * whatever the rules now say. The kernel picks source ports in small random steps and comes back
 * to the same ones within 80-140 s at 25 requests/s, so a generator on one host that lets it
 * choose keeps hitting those entries long after the endpoints dropped the pod: requests that fail
 * for how the test's one client is built, not for anything the cluster did. Clients spread over
 * many addresses (what a Service sees from its users) rarely repeat a tuple within 120 s;
 * stepping by one port, this generator repeats one after range / rate seconds (about 19
 * minutes at 25 requests/s).
 */
import { readFileSync } from "node:fs";

export interface PortRange {
  first: number;
  last: number;
}

/** The kernel's ephemeral range (net.ipv4.ip_local_port_range), Linux's default where unreadable. */
export function ephemeralPortRange(file = "/proc/sys/net/ipv4/ip_local_port_range"): PortRange {
  try {
    const [first, last] = readFileSync(file, "utf8").trim().split(/\s+/).map(Number);
    if (first && last && first <= last) return { first, last };
  } catch {
    // No procfs: fall through to the default.
  }
  return { first: 32768, last: 60999 };
}

/** A function that returns the ports of `range` in turn from `start`, wrapping at the end. */
export function sourcePortCycle(
  range: PortRange = ephemeralPortRange(),
  start = range.first + Math.floor(Math.random() * (range.last - range.first + 1)),
): () => number {
  const size = range.last - range.first + 1;
  let offset = start - range.first;
  return () => {
    const port = range.first + (((offset % size) + size) % size);
    offset++;
    return port;
  };
}

/**
 * Sends with the next free port of `ports`: a port another socket holds (EADDRINUSE) is skipped,
 * up to `attempts` times. Any other failure is the request's and names the port it came from.
 */
export async function sendFromNextPort<T>(
  ports: () => number,
  send: (localPort: number) => Promise<T>,
  attempts = 16,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const port = ports();
    try {
      return await send(port);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "EADDRINUSE" && attempt < attempts) continue;
      throw Object.assign(new Error(`${(err as Error).message} (source port ${port})`), { code });
    }
  }
}
