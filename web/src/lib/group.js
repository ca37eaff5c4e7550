// Tensor name -> (layer, module) for the diff heatmaps. Knows Hugging Face naming
// (model.layers.N.self_attn.q_proj.weight, GPT-2's transformer.h.N.attn.c_attn, BERT's
// encoder.layer.N.attention.self.query, PEFT's base_model.model.… and .lora_A/.lora_B) and GGUF
// naming (blk.N.attn_q.weight, ffn_gate, attn_norm, token_embd, output). Pure: no DOM.

// Canonical module columns, in display order.
export const kModuleOrder = [
  'embed', 'embed.pos', 'norm.attn', 'attn.q', 'attn.k', 'attn.v', 'attn.qkv', 'attn.o',
  'norm.mlp', 'mlp.gate', 'mlp.up', 'mlp.down', 'norm.final', 'lm_head',
];

const kGgufModules = {
  attn_q: 'attn.q', attn_k: 'attn.k', attn_v: 'attn.v', attn_qkv: 'attn.qkv',
  attn_output: 'attn.o', attn_norm: 'norm.attn', ffn_norm: 'norm.mlp', ffn_gate: 'mlp.gate',
  ffn_up: 'mlp.up', ffn_down: 'mlp.down', token_embd: 'embed', position_embd: 'embed.pos',
  output: 'lm_head', output_norm: 'norm.final',
};

// Module part inside a layer (suffix and .weight/.bias stripped) -> canonical module.
const kLayerModules = [
  [/(^|\.)(q_proj|query|q)$/, 'attn.q'],
  [/(^|\.)(k_proj|key|k)$/, 'attn.k'],
  [/(^|\.)(v_proj|value|v)$/, 'attn.v'],
  [/(^|\.)(c_attn|qkv_proj|query_key_value|Wqkv|qkv)$/, 'attn.qkv'],
  [/(^|\.)(o_proj|out_proj|dense)$/, 'attn.o', /attn|attention/],
  [/^attn\.c_proj$/, 'attn.o'],
  [/(^|\.)(gate_proj|w1)$/, 'mlp.gate'],
  [/(^|\.)(up_proj|c_fc|fc1|w3)$/, 'mlp.up'],
  [/^intermediate\.dense$/, 'mlp.up'],
  [/(^|\.)(down_proj|fc2|w2)$/, 'mlp.down'],
  [/^mlp\.c_proj$/, 'mlp.down'],
  [/^output\.dense$/, 'mlp.down'],
  [/(^|\.)(input_layernorm|ln_1|self_attn_layer_norm|attention_norm|norm1)$/, 'norm.attn'],
  [/^attention\.output\.LayerNorm$/, 'norm.attn'],
  [/(^|\.)(post_attention_layernorm|ln_2|final_layer_norm|ffn_norm|norm2)$/, 'norm.mlp'],
  [/^output\.LayerNorm$/, 'norm.mlp'],
];

const kTopModules = [
  [/(^|\.)(embed_tokens|wte|word_embeddings|tok_embeddings|token_embd)$/, 'embed'],
  [/(^|\.)(wpe|position_embeddings|embed_positions|position_embd)$/, 'embed.pos'],
  [/(^|\.)(lm_head|output)$/, 'lm_head'],
  [/(^|\.)(norm|ln_f|final_layernorm|final_layer_norm|output_norm)$/, 'norm.final'],
];

// PEFT/LoRA and parameter suffixes that do not change the module.
function stripSuffixes(s) {
  let prev;
  do {
    prev = s;
    s = s.replace(/\.(weight|bias|scale|lora_A|lora_B|lora_embedding_A|lora_embedding_B|base_layer|default)$/, '');
  } while (s !== prev);
  return s;
}

// Returns {layer: number|null, module: string}. module is one of kModuleOrder when the name is
// recognised; otherwise the name's own module path (so unknown tensors still get a column).
export function groupOf(name) {
  const n = String(name);
  const g = /^blk\.(\d+)\.([^.]+)/.exec(n);
  if (g) return { layer: Number(g[1]), module: kGgufModules[g[2]] || g[2] };
  if (/^[a-z_]+(\.(weight|bias))?$/.test(n)) {
    const base = n.replace(/\.(weight|bias)$/, '');
    if (kGgufModules[base]) return { layer: null, module: kGgufModules[base] };
  }
  const m = /(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.(.+)$/.exec(n);
  if (m) {
    const rest = stripSuffixes(m[2]);
    for (const [re, mod, ctx] of kLayerModules) {
      if (re.test(rest) && (!ctx || ctx.test(rest))) return { layer: Number(m[1]), module: mod };
    }
    return { layer: Number(m[1]), module: rest };
  }
  const top = stripSuffixes(n);
  for (const [re, mod] of kTopModules) if (re.test(top)) return { layer: null, module: mod };
  // Unknown top-level tensor: its last meaningful path component(s).
  const parts = top.split('.');
  return { layer: null, module: parts.slice(-2).join('.') };
}

// Sorts module names: canonical ones first in kModuleOrder, then the others alphabetically.
export function sortModules(mods) {
  const rank = (m) => { const i = kModuleOrder.indexOf(m); return i < 0 ? kModuleOrder.length : i; };
  return [...mods].sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
}

// Builds the heatmap grid from per-tensor records {name, ...}. Returns
// {rows: [layer|null...] (layers ascending, then null = outside layers), cols: [module...],
//  cells: Map("row|col" -> [records])}.
export function buildGrid(records) {
  const cells = new Map();
  const rows = new Set();
  const cols = new Set();
  for (const r of records) {
    const { layer, module } = groupOf(r.name);
    rows.add(layer);
    cols.add(module);
    const key = cellKey(layer, module);
    if (!cells.has(key)) cells.set(key, []);
    cells.get(key).push(r);
  }
  const layers = [...rows].filter((x) => x !== null).sort((a, b) => a - b);
  if (rows.has(null)) layers.push(null);
  return { rows: layers, cols: sortModules(cols), cells };
}

export function cellKey(layer, module) {
  return (layer === null ? '-' : String(layer)) + '|' + module;
}

// Combines the value-diff records of the tensors in one cell into one set of metrics, exactly
// as the tensors' sums would give: rel_l2 = sqrt(Σ l2_diff²) / sqrt(Σ l2_a²); changed fraction
// = Σ changed / Σ elements; cosine from the norms (a·b = (|a|² + |b|² − |a−b|²) / 2);
// max abs = the max. Tensors without values (added/removed) are skipped.
export function combineMetrics(recs) {
  let a2 = 0, b2 = 0, d2 = 0, changed = 0, elements = 0, maxAbs = null, n = 0;
  for (const r of recs) {
    if (r.l2_a === undefined || r.l2_a === null) continue;
    n++;
    a2 += r.l2_a * r.l2_a; b2 += r.l2_b * r.l2_b; d2 += r.l2_diff * r.l2_diff;
    changed += r.changed || 0; elements += r.elements || 0;
    if (r.max_abs_change !== null && r.max_abs_change !== undefined) {
      maxAbs = maxAbs === null ? r.max_abs_change : Math.max(maxAbs, r.max_abs_change);
    }
  }
  if (!n) return null;
  if (n === 1) {
    const r = recs.find((x) => x.l2_a !== undefined && x.l2_a !== null);
    // One side all zeros: the cosine is undefined (the JSON's 0 is no angle).
    const cosine = (r.l2_a === 0) !== (r.l2_b === 0) ? null : r.cosine;
    return { rel_l2: r.rel_l2, fraction_changed: r.fraction_changed, cosine, max_abs_change: r.max_abs_change };
  }
  const rel = a2 > 0 ? Math.sqrt(d2) / Math.sqrt(a2) : null;
  const cos = a2 > 0 && b2 > 0 ? (a2 + b2 - d2) / 2 / Math.sqrt(a2 * b2) : null;
  return {
    rel_l2: rel,
    fraction_changed: elements ? changed / elements : 0,
    cosine: cos === null ? null : Math.max(-1, Math.min(1, cos)),
    max_abs_change: maxAbs,
  };
}

// The heatmap metrics: key, label, how to colour (higher t = more change).
export const kMetrics = [
  { key: 'rel_l2', label: 'relative L2', log: true },
  { key: 'fraction_changed', label: 'changed fraction', log: false, min: 0, max: 1 },
  { key: 'cosine', label: 'cosine', log: false, invert: true },
  { key: 'max_abs_change', label: 'max abs change', log: true },
];

// Value used for colouring a metric (cosine: 1 − cos, so "more change" is darker).
export function colourValue(metric, v) {
  if (v === null || v === undefined) return null;
  return metric.invert ? 1 - v : v;
}
