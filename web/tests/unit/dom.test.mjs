// The rendering helpers never parse HTML: data goes into text nodes and attribute values.
// Run against a minimal fake DOM that has no innerHTML at all (any use would throw).
import test from 'node:test';
import assert from 'node:assert/strict';

class FakeNode {
  constructor(nodeType) { this.nodeType = nodeType; this.childNodes = []; }
  appendChild(c) { this.childNodes.push(c); return c; }
  removeChild(c) { this.childNodes.splice(this.childNodes.indexOf(c), 1); return c; }
  get firstChild() { return this.childNodes[0] || null; }
  get textContent() { return this.childNodes.map((c) => c.textContent).join(''); }
  set textContent(v) { this.childNodes = [new FakeText(v)]; }
}
class FakeText extends FakeNode {
  constructor(data) { super(3); this.data = String(data); }
  get textContent() { return this.data; }
}
class FakeElement extends FakeNode {
  constructor(tag) {
    super(1); this.tagName = tag; this.attributes = {}; this.listeners = {}; this.dataset = {}; this.className = ''; this.id = '';
    this.styles = {};
    this.style = { setProperty: (p, v) => { this.styles[p] = v; } };
  }
  setAttribute(k, v) { this.attributes[k] = v; }
  addEventListener(k, f) { this.listeners[k] = f; }
  get innerHTML() { throw new Error('innerHTML used'); }
  set innerHTML(_v) { throw new Error('innerHTML used'); }
}
globalThis.document = {
  createElement: (t) => new FakeElement(t),
  createTextNode: (s) => new FakeText(s),
};

const { h, clear, route } = await import('../../src/lib/dom.js');
const { parseRoute } = await import('../../src/main.js');

const hostile = '<img src=x onerror=alert(1)><script>alert(1)</script>';

test('h: strings become text nodes, verbatim', () => {
  const el = h('td.name', null, hostile, 42, null, false, ['a', 'b']);
  assert.equal(el.tagName, 'td');
  assert.equal(el.className, 'name');
  assert.ok(el.childNodes.every((c) => c.nodeType === 3));
  assert.equal(el.textContent, hostile + '42ab');
});

test('h: text, attributes, id/classes, style via CSSOM, handlers only as functions', () => {
  const f = () => {};
  const el = h('a#x.c1.c2', { href: '#/r/' + hostile, text: hostile, title: hostile, onclick: f, style: { color: 'red' }, dataset: { d: 1 }, hidden: false });
  assert.equal(el.id, 'x');
  assert.equal(el.className, 'c1 c2');
  assert.equal(el.textContent, hostile);
  assert.equal(el.attributes.title, hostile);
  assert.equal(el.listeners.click, f);
  assert.equal(el.styles.color, 'red');
  assert.equal(el.dataset.d, '1');
  assert.equal('hidden' in el.attributes, false);
  assert.throws(() => h('a', { onclick: 'alert(1)' }), TypeError);
});

test('h: id and classes in any order', () => {
  const a = h('table.data#catalog');
  assert.equal(a.tagName, 'table'); assert.equal(a.id, 'catalog'); assert.equal(a.className, 'data');
  const b = h('dl#summary.facts.x');
  assert.equal(b.id, 'summary'); assert.equal(b.className, 'facts x');
  assert.equal(h('.only').tagName, 'div');
});

test('clear removes every child', () => {
  const el = h('div', null, 'a', h('span'), 'b');
  clear(el);
  assert.equal(el.childNodes.length, 0);
});

test('route encodes parts; parseRoute reads them back (names with /, digests with :)', () => {
  const d = 'sha256:' + 'ab'.repeat(32);
  const r = route('r', 'org/model <x>', 'diff', d, d);
  assert.ok(!r.includes('<'));
  assert.deepEqual(parseRoute(r), { page: 'diff', params: { name: 'org/model <x>', from: d, to: d }, query: {} });
  assert.deepEqual(parseRoute(route('r', 'a/v/b')), { page: 'repo', params: { name: 'a/v/b' }, query: {} });
  assert.deepEqual(parseRoute('#/r/org/model/v/' + d), { page: 'version', params: { name: 'org/model', digest: d }, query: {} });
  assert.deepEqual(parseRoute('#/r/org/model'), { page: 'repo', params: { name: 'org/model' }, query: {} });
  assert.deepEqual(parseRoute('#/?q=gpt'), { page: 'catalog', params: {}, query: { q: 'gpt' } });
  assert.deepEqual(parseRoute(''), { page: 'catalog', params: {}, query: {} });
  assert.equal(parseRoute('#/r/%E0%A4%A').params.name, '%E0%A4%A'); // bad escapes do not throw
});
