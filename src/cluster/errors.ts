/**
 * The local control plane's own error: what went wrong, named so that the CLI prints it as a
 * message rather than a stack. Its own module, so that every part of src/cluster can throw it
 * without importing cluster.ts (which imports them).
 */
export class ClusterError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClusterError";
  }
}
