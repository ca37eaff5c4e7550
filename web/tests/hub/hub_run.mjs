// One client session of @huggingface/hub (pinned in web/package.json) against a blz Hub endpoint,
// run as its own process by hub_client.test.mjs so that HTTPS can trust the test CA
// (NODE_EXTRA_CA_CERTS is read at start-up only).
//
//   node hub_run.mjs '{"hubUrl": "...", "repo": "org/model", "revision": "v1",
//                      "accessToken": "hf_..." | null, "out": "DIR"}'
//
// Lists the revision's files (listFiles, recursive), reads the model's info (modelInfo), and
// downloads every file (downloadFile: the bytes=0-0 probe, then the WebBlob's ranged reads) into
// OUT/<path>; the largest file is also read as a cut download resumed with Range (its first
// third, then the rest from where the cut left off, through WebBlob.slice). Prints one JSON line:
//   {"ok": true, "files": [{path, size, oid, lfs}], "info": {...}, "resumed": {path, size}}
// or {"ok": false, "status": <HTTP status or null>, "message": "..."} on the first failure.
import fs from 'node:fs';
import path from 'node:path';
import { downloadFile, listFiles, modelInfo } from '@huggingface/hub';

const args = JSON.parse(process.argv[2]);
const creds = args.accessToken ? { accessToken: args.accessToken } : {};
const repo = { type: 'model', name: args.repo };

async function bytesOf(blob) {
  return Buffer.from(await blob.arrayBuffer());
}

try {
  const files = [];
  for await (const entry of listFiles({ repo, revision: args.revision, recursive: true, hubUrl: args.hubUrl, ...creds })) {
    if (entry.type !== 'file') continue;
    files.push({ path: entry.path, size: entry.size, oid: entry.oid, lfs: entry.lfs ?? null });
  }
  const info = await modelInfo({ name: args.repo, revision: args.revision, hubUrl: args.hubUrl, additionalFields: ['sha'], ...creds });
  let largest = null;
  for (const f of files) {
    const blob = await downloadFile({ repo, path: f.path, revision: args.revision, hubUrl: args.hubUrl, xet: false, ...creds });
    if (blob === null) throw Object.assign(new Error(`downloadFile: no ${f.path}`), { statusCode: 404 });
    const out = path.join(args.out, f.path);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, await bytesOf(blob));
    if (largest === null || f.size > largest.size) largest = { ...f, blob };
  }
  let resumed = null;
  if (largest !== null) {
    // A cut download resumed with Range: the first third arrives, the connection is lost, the
    // client asks for the rest (WebBlob.slice(start) -> Range: bytes=<start>-<end>).
    const cut = Math.floor(largest.size / 3);
    const first = await bytesOf(largest.blob.slice(0, cut));
    const rest = await bytesOf(largest.blob.slice(cut));
    const out = path.join(args.out + '.resumed', largest.path);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, Buffer.concat([first, rest]));
    resumed = { path: largest.path, size: first.length + rest.length };
  }
  console.log(JSON.stringify({
    ok: true,
    files,
    info: { id: info.id, name: info.name, private: info.private, sha: info.sha ?? null },
    resumed,
  }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, status: e.statusCode ?? null, message: String(e.message ?? e) }));
}
