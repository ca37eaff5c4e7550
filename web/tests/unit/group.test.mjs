// name -> (layer, module) grouping for Hugging Face and GGUF tensor names, and the cell metrics.
import test from 'node:test';
import assert from 'node:assert/strict';
import { groupOf, buildGrid, combineMetrics, sortModules, cellKey } from '../../src/lib/group.js';

const cases = [
  // Hugging Face (Llama/Mistral) naming
  ['model.layers.0.self_attn.q_proj.weight', 0, 'attn.q'],
  ['model.layers.12.self_attn.k_proj.weight', 12, 'attn.k'],
  ['model.layers.3.self_attn.v_proj.weight', 3, 'attn.v'],
  ['model.layers.3.self_attn.o_proj.weight', 3, 'attn.o'],
  ['model.layers.79.mlp.gate_proj.weight', 79, 'mlp.gate'],
  ['model.layers.1.mlp.up_proj.weight', 1, 'mlp.up'],
  ['model.layers.1.mlp.down_proj.weight', 1, 'mlp.down'],
  ['model.layers.1.input_layernorm.weight', 1, 'norm.attn'],
  ['model.layers.1.post_attention_layernorm.weight', 1, 'norm.mlp'],
  ['model.embed_tokens.weight', null, 'embed'],
  ['model.norm.weight', null, 'norm.final'],
  ['lm_head.weight', null, 'lm_head'],
  // GGUF naming
  ['blk.0.attn_q.weight', 0, 'attn.q'],
  ['blk.0.attn_k.weight', 0, 'attn.k'],
  ['blk.0.attn_v.weight', 0, 'attn.v'],
  ['blk.7.attn_output.weight', 7, 'attn.o'],
  ['blk.0.ffn_gate.weight', 0, 'mlp.gate'],
  ['blk.0.ffn_up.weight', 0, 'mlp.up'],
  ['blk.0.ffn_down.weight', 0, 'mlp.down'],
  ['blk.0.attn_norm.weight', 0, 'norm.attn'],
  ['blk.0.ffn_norm.weight', 0, 'norm.mlp'],
  ['token_embd.weight', null, 'embed'],
  ['output_norm.weight', null, 'norm.final'],
  ['output.weight', null, 'lm_head'],
  // GPT-2 (tiny-gpt2 in the corpus)
  ['transformer.h.0.attn.c_attn.weight', 0, 'attn.qkv'],
  ['transformer.h.0.attn.c_attn.bias', 0, 'attn.qkv'],
  ['transformer.h.1.attn.c_proj.weight', 1, 'attn.o'],
  ['transformer.h.1.mlp.c_fc.weight', 1, 'mlp.up'],
  ['transformer.h.1.mlp.c_proj.weight', 1, 'mlp.down'],
  ['transformer.h.1.ln_1.weight', 1, 'norm.attn'],
  ['transformer.h.1.ln_2.bias', 1, 'norm.mlp'],
  ['transformer.wte.weight', null, 'embed'],
  ['transformer.wpe.weight', null, 'embed.pos'],
  ['transformer.ln_f.weight', null, 'norm.final'],
  // BERT/RoBERTa and PEFT LoRA adapters
  ['base_model.model.roberta.encoder.layer.5.attention.self.query.lora_A.weight', 5, 'attn.q'],
  ['base_model.model.roberta.encoder.layer.5.attention.self.value.lora_B.weight', 5, 'attn.v'],
  ['roberta.encoder.layer.2.attention.output.dense.weight', 2, 'attn.o'],
  ['roberta.encoder.layer.2.attention.output.LayerNorm.weight', 2, 'norm.attn'],
  ['roberta.encoder.layer.2.intermediate.dense.weight', 2, 'mlp.up'],
  ['roberta.encoder.layer.2.output.dense.weight', 2, 'mlp.down'],
  ['roberta.encoder.layer.2.output.LayerNorm.bias', 2, 'norm.mlp'],
  ['base_model.model.model.decoder.layers.11.self_attn.q_proj.lora_B.weight', 11, 'attn.q'],
  ['base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight', 0, 'attn.q'],
  ['base_model.model.model.decoder.layers.3.self_attn.out_proj.weight', 3, 'attn.o'],
  ['base_model.model.model.decoder.layers.3.fc1.weight', 3, 'mlp.up'],
];

for (const [name, layer, module] of cases) {
  test(`groupOf(${name})`, () => {
    assert.deepEqual(groupOf(name), { layer, module });
  });
}

test('unknown names keep a column of their own and never throw', () => {
  assert.deepEqual(groupOf('base_model.model.classifier.dense.weight'), { layer: null, module: 'classifier.dense' });
  assert.deepEqual(groupOf('model.layers.4.block_sparse_moe.gate.weight'), { layer: 4, module: 'block_sparse_moe.gate' });
  for (const n of ['', '.', '<script>alert(1)</script>', 'blk..x', 'layers.x.y', '\u0000']) {
    const g = groupOf(n);
    assert.equal(typeof g.module, 'string');
  }
});

test('sortModules: canonical order first, then the others alphabetically', () => {
  assert.deepEqual(sortModules(['zeta', 'mlp.down', 'attn.q', 'alpha', 'embed']), ['embed', 'attn.q', 'mlp.down', 'alpha', 'zeta']);
});

test('buildGrid: layers ascending (numerically), non-layer row last, cells hold their tensors', () => {
  const names = ['blk.10.attn_q.weight', 'blk.2.attn_q.weight', 'token_embd.weight', 'blk.2.ffn_up.weight', 'output.weight'];
  const g = buildGrid(names.map((name) => ({ name })));
  assert.deepEqual(g.rows, [2, 10, null]);
  assert.deepEqual(g.cols, ['embed', 'attn.q', 'mlp.up', 'lm_head']);
  assert.equal(g.cells.get(cellKey(2, 'attn.q'))[0].name, 'blk.2.attn_q.weight');
  assert.equal(g.cells.get(cellKey(null, 'embed')).length, 1);
  assert.equal(g.cells.get(cellKey(10, 'mlp.up')), undefined);
});

test('combineMetrics: one tensor passes its own values through', () => {
  const r = { name: 'a', l2_a: 2, l2_b: 2, l2_diff: 0.2, rel_l2: 0.1, fraction_changed: 0.5, cosine: 0.99, max_abs_change: 0.3, changed: 1, elements: 2 };
  assert.deepEqual(combineMetrics([r]), { rel_l2: 0.1, fraction_changed: 0.5, cosine: 0.99, max_abs_change: 0.3 });
});

test('combineMetrics: sums like one concatenated tensor', () => {
  // a = (3, 0), b = (3, 4) split into two 1-element tensors: a1=3,b1=3; a2=0,b2=4.
  const t1 = { l2_a: 3, l2_b: 3, l2_diff: 0, changed: 0, elements: 1, max_abs_change: 0 };
  const t2 = { l2_a: 0, l2_b: 4, l2_diff: 4, changed: 1, elements: 1, max_abs_change: 4 };
  const c = combineMetrics([t1, t2]);
  // |a-b| = 4, |a| = 3 -> rel 4/3; cos = a·b/(|a||b|) = 9/(3*5) = 0.6
  assert.ok(Math.abs(c.rel_l2 - 4 / 3) < 1e-12);
  assert.ok(Math.abs(c.cosine - 0.6) < 1e-12);
  assert.equal(c.fraction_changed, 0.5);
  assert.equal(c.max_abs_change, 4);
});

test('combineMetrics: no comparable tensor -> null', () => {
  assert.equal(combineMetrics([{ name: 'added', dtype: 'F32' }]), null);
});
