// Reads credentials as the contract says: an env var first, else the file of the same name in
// the mounted credentials directory. Values are trimmed (Secrets often end with a newline).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { rootCertificates } from "node:tls";
import {
  caBundleEnv,
  caBundleFile,
  credentialsDirEnv,
  credentialsSecretNameEnv,
  defaultCredentialsDir,
} from "./contract.ts";
import { DownloadError } from "./errors.ts";

export type Env = Readonly<Record<string, string | undefined>>;

export class Credentials {
  readonly env: Env;
  readonly dir: string;
  constructor(env: Env = process.env) {
    this.env = env;
    this.dir = env[credentialsDirEnv] || defaultCredentialsDir;
  }

  /** The value of NAME from env, else from <dir>/NAME, else undefined. */
  get(name: string): string | undefined {
    const fromEnv = this.env[name];
    if (fromEnv !== undefined && fromEnv !== "") return fromEnv.trim();
    const path = this.filePath(name);
    return path === undefined ? undefined : readFileSync(path, "utf8").trim();
  }

  /** The path of <dir>/NAME if that file exists. */
  filePath(name: string): string | undefined {
    const path = join(this.dir, name);
    try {
      readFileSync(path, { flag: "r" }).length;
      return path;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw new DownloadError(
        "InvalidArgument",
        `cannot read credential file ${path}: ${(err as Error).message}`,
        {
          hint: "check the credentials Secret's volume mount",
        },
      );
    }
  }

  /** System roots plus the configured CA bundle, or undefined when none is configured. */
  caCertificates(): string[] | undefined {
    const path = this.env[caBundleEnv] || this.filePath(caBundleFile);
    if (!path) return undefined;
    let pem: string;
    try {
      pem = readFileSync(path, "utf8");
    } catch (err) {
      throw new DownloadError("InvalidArgument", `${caBundleEnv}=${path}: ${(err as Error).message}`, {
        hint: "set it to a readable PEM file of CA certificates",
      });
    }
    if (!pem.includes("-----BEGIN CERTIFICATE-----")) {
      throw new DownloadError("InvalidArgument", `CA bundle ${path} holds no PEM certificate`, {
        hint: 'expected "-----BEGIN CERTIFICATE-----" blocks',
      });
    }
    return [...rootCertificates, pem];
  }

  /** "in Secret x" when the operator told us the Secret's name, for failure hints. */
  secretHint(keys: string): string {
    const secret = this.env[credentialsSecretNameEnv];
    return secret ? `check ${keys} in Secret ${secret}` : `check ${keys}`;
  }
}
