// Test helpers: a safetensors writer (for the hostile-name model), the hostile strings, the
// shared state of global_setup.mjs, and a page fixture that fails on console errors.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const hostileNames = [
  'model.layers.0.self_attn.q_proj.weight',
  'model.layers.0.<script>alert(1)</script>.weight',
  'model.layers.1.<img src=x onerror=alert(1)>.weight',
  '"><svg onload=alert(1)>',
  '<img src=x onerror=alert(1)>',
];

export const hostileConfig = {
  model_type: '<script>alert(1)</script>',
  architectures: ['<img src=x onerror=alert(1)>'],
  '<b onmouseover=alert(1)>key</b>': '"><iframe src=javascript:alert(1)>',
  num_hidden_layers: 2,
};

// Writes an F32 safetensors file: tensors [{name, values}] (1-D), optional __metadata__.
export function writeSafetensors(file, tensors, metadata) {
  const header = {};
  let off = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: 'F32', shape: [t.values.length], data_offsets: [off, off + 4 * t.values.length] };
    off += 4 * t.values.length;
  }
  if (metadata) header.__metadata__ = metadata;
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8) json += ' ';
  const hb = Buffer.from(json);
  const buf = Buffer.alloc(8 + hb.length + off);
  buf.writeBigUInt64LE(BigInt(hb.length), 0);
  hb.copy(buf, 8);
  let p = 8 + hb.length;
  for (const t of tensors) for (const v of t.values) { buf.writeFloatLE(v, p); p += 4; }
  fs.writeFileSync(file, buf);
}

export function state() {
  const f = process.env.BLZ_WEB_STATE;
  if (!f || !fs.existsSync(f)) return { skip: 'no global setup state (run through playwright.config.mjs)' };
  return JSON.parse(fs.readFileSync(f, 'utf8'));
}

const webDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export function screenshotPath(name) {
  return path.join(webDir, 'test-results', 'screenshots', name + '.png');
}
