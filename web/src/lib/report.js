// Pure helpers (no DOM) that read the registry's patch reports, value diffs and statistics for
// the pages: per-file patch bytes, the undefined cases of the value metrics, NaN/Inf counts.
import { fmtBytes, fmtCos, fmtNum, fmtInt } from './format.js';

// Per file of a patch report (GET .../blz/patch-report, docs/registry-api.md): its pieces'
// patch bytes (header piece plus every tensor piece of the file) and how many of its tensors
// were patched (or added) and identical. Tensor pieces without a "file" field (an older
// registry) are not counted. Returns [{file, patch_bytes, tensors, patched, identical,
// header_codec}] in the order files first appear.
export function filePatchTotals(pieces) {
  const byFile = new Map();
  const entry = (file) => {
    let e = byFile.get(file);
    if (!e) {
      e = { file, patch_bytes: 0, tensors: 0, patched: 0, identical: 0, header_codec: null };
      byFile.set(file, e);
    }
    return e;
  };
  for (const p of pieces || []) {
    const file = p.file || (p.kind === 'file' ? p.name : null);
    if (!file) continue;
    const e = entry(file);
    e.patch_bytes += p.patch_bytes || 0;
    if (p.kind === 'tensor') {
      e.tensors += 1;
      if (p.codec === 'identical') e.identical += 1;
      else e.patched += 1;
    } else {
      e.header_codec = p.codec || null;
    }
  }
  return [...byFile.values()];
}

// One file's line of the diff page: "model.safetensors 1.20 MiB (28 of 28 tensors patched)",
// "tokenizer.json 0 B (identical)".
export function filePatchText(e) {
  if (!e.tensors) return `${e.file} ${fmtBytes(e.patch_bytes)} (${e.header_codec || 'identical'})`;
  const what = e.patched
    ? `${fmtInt(e.patched)} of ${fmtInt(e.tensors)} tensors patched`
    : `all ${fmtInt(e.tensors)} tensors identical`;
  return `${e.file} ${fmtBytes(e.patch_bytes)} (${what})`;
}

// The cosine of a value-diff record ({cosine, l2_a, l2_b}, formats/value_diff.h): undefined
// when exactly one side is all zeros (the registry's JSON says 0 there). The CLI prints the
// rel L2 of such a tensor as inf; the view says why the cosine has no value.
export function cosineText(r) {
  if (!r || r.cosine === undefined || r.cosine === null) return fmtCos(r ? r.cosine : null);
  if (r.l2_a === 0 && r.l2_b > 0) return 'n/a (base is all zeros)';
  if (r.l2_b === 0 && r.l2_a > 0) return 'n/a (target is all zeros)';
  return fmtCos(r.cosine);
}

// The cosine for sorting and colouring: null when undefined (as above).
export function cosineValue(r) {
  if (!r || r.cosine === undefined || r.cosine === null) return null;
  if ((r.l2_a === 0) !== (r.l2_b === 0)) return null;
  return r.cosine;
}

// The relative L2 of a value-diff record: the JSON's null with a zero base and a change is
// infinite (the CLI's "inf").
export function relL2Text(r) {
  if (r && (r.rel_l2 === null || r.rel_l2 === undefined) && r.l2_a === 0 && r.l2_diff > 0) return 'inf';
  return fmtNum(r ? r.rel_l2 : null);
}

// NaN/Inf of a statistics document's summary (GET .../blz/stats, `blz inspect --stats`), or
// of a listing's "non_finite" object ({nan, inf, all_non_finite, some_non_finite}):
// {nan, inf, all (tensors entirely non-finite)} or null when it has none.
export function nonFiniteOf(s) {
  if (!s) return null;
  const nan = s.nan || 0;
  const inf = (s.pos_inf || 0) + (s.neg_inf || 0) + (s.inf || 0);
  if (!nan && !inf && !s.all_non_finite) return null;
  return { nan, inf, all: s.all_non_finite || 0 };
}

// The marker's text: "⚠ NaN/Inf (1,024 NaN, 0 Inf)".
export function nonFiniteText(nf) {
  return `⚠ NaN/Inf (${fmtInt(nf.nan)} NaN, ${fmtInt(nf.inf)} Inf)`;
}
