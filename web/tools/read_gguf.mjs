// Reads a GGUF file with the independent reader @huggingface/gguf and prints what it found as
// JSON on stdout: {"metadata": {key: value, ...}, "tensors": [{"name", "shape", "dtype",
// "offset"}]} (shape in GGUF order, ne0 first; BigInts as numbers; long arrays summarized as
// {"array_length": n, "first": [...]}). Used by blz's export tests (tests/formats/export) as a
// second opinion on the files blz writes. Usage: node tools/read_gguf.mjs FILE.gguf
import { gguf } from "@huggingface/gguf";
import path from "node:path";

const file = process.argv[2];
if (!file) {
  console.error("usage: node tools/read_gguf.mjs FILE.gguf");
  process.exit(2);
}

const plain = (v) => {
  if (typeof v === "bigint") return Number(v);
  if (Array.isArray(v)) {
    if (v.length > 64) return { array_length: v.length, first: v.slice(0, 8).map(plain) };
    return v.map(plain);
  }
  return v;
};

try {
  const { metadata, tensorInfos } = await gguf(path.resolve(file), { allowLocalFile: true });
  const meta = {};
  for (const [k, v] of Object.entries(metadata)) meta[k] = plain(v);
  const tensors = tensorInfos.map((t) => ({
    name: t.name,
    shape: t.shape.map(Number),
    dtype: t.dtype,
    offset: Number(t.offset),
  }));
  process.stdout.write(JSON.stringify({ metadata: meta, tensors }) + "\n");
} catch (e) {
  console.error(`read_gguf: ${file}: ${e && e.message ? e.message : e}`);
  process.exit(1);
}
