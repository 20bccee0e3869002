// The plain AWS SDK baseline for the benchmark: list a prefix and stream every object to disk,
// N at a time, with nothing else (no resume, no hashing, no publish).
// Usage: node bench/downloader/s3-sdk-baseline.ts ENDPOINT BUCKET PREFIX DEST CONCURRENCY
import { createWriteStream } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { GetObjectCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";

const [endpoint, bucket, prefix, dest, concurrency] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
];
const s3 = new S3Client({
  endpoint,
  region: "us-east-1",
  forcePathStyle: true,
  credentials: { accessKeyId: "bench", secretAccessKey: "bench" },
});

const keys: string[] = [];
let token: string | undefined;
do {
  const page = await s3.send(
    new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
  );
  for (const o of page.Contents ?? []) if (o.Key) keys.push(o.Key);
  token = page.IsTruncated ? page.NextContinuationToken : undefined;
} while (token);

let next = 0;
async function worker(): Promise<void> {
  while (next < keys.length) {
    const key = keys[next++]!;
    const out = join(dest, key.slice(prefix.length));
    await mkdir(dirname(out), { recursive: true });
    const res = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    await pipeline(res.Body as Readable, createWriteStream(out));
  }
}
await Promise.all(Array.from({ length: Number(concurrency) }, worker));
s3.destroy();
