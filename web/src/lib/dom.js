// DOM helpers that never parse HTML: every piece of data becomes a text node or an attribute
// value set through the DOM, so tensor names, tags and metadata cannot inject markup.

// h('tag.class1.class2', {attr: value, onclick: fn, text: 'x'}, ...children)
// children: strings/numbers (text nodes), Nodes, arrays of them; null/undefined/false skipped.
export function h(spec, attrs, ...children) {
  // 'tag', then any mix of '.class' and '#id' tokens (in any order).
  const sp = String(spec);
  const tag = /^[a-z0-9]*/i.exec(sp)[0];
  const el = document.createElement(tag || 'div');
  const classes = [];
  for (const [tok] of sp.slice(tag.length).matchAll(/[.#][^.#]+/g)) {
    if (tok[0] === '#') el.id = tok.slice(1); else classes.push(tok.slice(1));
  }
  if (classes.length) el.className = classes.join(' ');
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) {
        if (typeof v !== 'function') throw new TypeError(`h: ${k} must be a function`);
        el.addEventListener(k.slice(2), v);
      } else if (k === 'text') {
        el.textContent = String(v);
      } else if (k === 'class') {
        el.className = [el.className, v].filter(Boolean).join(' ');
      } else if (k === 'style') {
        // CSSOM (allowed by the strict CSP, unlike style="" attributes).
        for (const [p, pv] of Object.entries(v)) el.style.setProperty(p, pv);
      } else if (k === 'dataset') {
        for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
      } else if (k === 'value' || k === 'checked' || k === 'disabled') {
        el[k] = v;
      } else {
        el.setAttribute(k, v === true ? '' : String(v));
      }
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (typeof c === 'object' && 'nodeType' in c) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// A link inside the app: a hash route of encoded parts (a '/' inside a part, as in a repository
// name, becomes %2F so the route stays unambiguous; ':' of digests is kept readable).
export function route(...parts) {
  return '#/' + parts.map((p) => encodeURIComponent(String(p)).replace(/%3A/g, ':')).join('/');
}
