// #/r/<name> — a repository's versions as a timeline: tags, digest, size, push time, structure,
// patch size from the previous version of the same structure (what an upgrade downloads), the
// `blz pull` command; pick two versions to diff them.
import { h, clear, route } from '../lib/dom.js';
import { getJson, getAsync, repoPath, enc } from '../lib/api.js';
import { fmtBytes, fmtTime, shortDigest } from '../lib/format.js';
import { copyField, errorBox, progressBox } from '../lib/ui.js';
import { nonFiniteOf, nonFiniteText } from '../lib/report.js';

// How many versions (newest first) the page asks statistics for when the registry has none
// yet, so that their NaN/Inf marker can show: one, to keep within the registry's computation
// budget per client (the catalog shows what was computed).
const kStatsProbe = 1;

export async function repoPage(root, { name }, ctx) {
  const doc = await getJson(repoPath(name, 'blz/versions'), { signal: ctx.signal });
  const versions = doc.versions || [];
  const picked = [];
  const compare = h('button#compare', { type: 'button', disabled: true }, 'compare the two picked versions');
  const pickInfo = h('span.pick-info', { 'aria-live': 'polite', text: 'Pick two versions to compare.' });
  compare.addEventListener('click', () => {
    if (picked.length !== 2) return;
    // Older → newer, by position in the newest-first list.
    const [a, b] = [...picked].sort((x, y) => versions.indexOf(y) - versions.indexOf(x));
    location.hash = route('r', name, 'diff', a.digest, b.digest);
  });
  const list = h('ol.timeline');
  const flags = new Map();  // digest -> the marker's span
  for (const v of versions) list.appendChild(versionItem(v));
  root.appendChild(h('section', null,
    h('nav.crumbs', null, h('a', { href: '#/', text: 'repositories' }), ' / ', h('span', { text: name })),
    h('h1', { text: name }),
    h('p', { text: `${versions.length} version${versions.length === 1 ? '' : 's'}, newest first.` }),
    h('div.toolbar', null, compare, ' ', pickInfo),
    list));
  probeStats();

  // Statistics not computed yet: ask for those of the newest few, then mark what they show.
  async function probeStats() {
    const unknown = versions.filter((v) => v.non_finite === null).slice(0, kStatsProbe);
    for (const v of unknown) {
      try {
        const doc = await getAsync(repoPath(name, `blz/stats?digest=${enc(v.digest)}`), { signal: ctx.signal });
        markNonFinite(v.digest, nonFiniteOf(((doc && doc.stats) || doc || {}).summary));
      } catch (e) {
        if (e.name === 'AbortError') return;
        // Best effort: the page works without the marker.
      }
    }
  }

  function markNonFinite(digest, nf) {
    const el = flags.get(digest);
    if (!el || !nf) return;
    el.textContent = nonFiniteText(nf);
    el.hidden = false;
    el.closest('li').classList.add('alarm');
  }

  function versionItem(v) {
    const box = h('input', { type: 'checkbox', 'aria-label': `pick ${v.tags && v.tags.length ? v.tags.join(', ') : shortDigest(v.digest)} for comparison` });
    box.addEventListener('change', () => {
      if (box.checked) {
        picked.push(v);
        if (picked.length > 2) {
          const old = picked.shift();
          const oldBox = list.querySelector(`input[data-digest="${CSS.escape(old.digest)}"]`);
          if (oldBox) oldBox.checked = false;
        }
      } else {
        const i = picked.indexOf(v);
        if (i >= 0) picked.splice(i, 1);
      }
      compare.disabled = picked.length !== 2;
      pickInfo.textContent = picked.length === 2 ? 'Ready to compare.' : `Picked ${picked.length} of 2.`;
    });
    box.dataset.digest = v.digest;
    const host = location.host;
    const patch = h('span.patch');
    renderPatch(v, patch);
    const nf = nonFiniteOf(v.non_finite);
    const flag = h('span.nan-flag', { title: 'this version has NaN/Inf values', hidden: !nf, text: nf ? nonFiniteText(nf) : '' });
    flags.set(v.digest, flag);
    return h('li.version', { class: nf ? 'alarm' : null, dataset: { digest: v.digest } },
      h('div.version-head', null,
        box, ' ',
        (v.tags && v.tags.length ? v.tags : ['(untagged)']).map((t) => h('span.tag', { text: t })),
        ' ',
        h('a.digest', { href: route('r', name, 'v', v.digest), title: v.digest, text: shortDigest(v.digest) }),
        ' ', flag),
      h('dl.facts', null,
        h('dt', { text: 'size' }), h('dd.size', { text: fmtBytes(v.size) }),
        h('dt', { text: 'pushed' }), h('dd', { text: fmtTime(v.pushed) }),
        h('dt', { text: 'structure' }), h('dd', null, h('code', { title: v.structure || '', text: (v.structure || '—').slice(0, 16) })),
        h('dt', { text: 'upgrade patch' }), h('dd', null, patch)),
      h('div.pull', null, copyField(`blz pull ${host}/${name}@${v.digest}`, `pull command for ${shortDigest(v.digest)}`)));
  }

  function renderPatch(v, el) {
    clear(el);
    const p = v.previous;
    if (!p) { el.textContent = 'no earlier version of this structure'; return; }
    // The base by name (issue 24: reports name it NAME:TAG, not a bare digest).
    const prev = versions.find((x) => x.digest === p.digest);
    const label = prev && prev.tags && prev.tags.length ? `${name}:${prev.tags[0]} (${shortDigest(p.digest)})` : `${name}@${shortDigest(p.digest)}`;
    const from = h('a.patch-from', { href: route('r', name, 'diff', p.digest, v.digest), title: p.digest, text: 'from ' + label });
    if (p.patch_bytes !== null && p.patch_bytes !== undefined) {
      el.append(h('strong.patch-bytes', { text: fmtBytes(p.patch_bytes) }), ' ', from,
        v.size ? ` (${((p.patch_bytes / v.size) * 100).toFixed(1)}% of the full size)` : '');
      return;
    }
    const btn = h('button', { type: 'button' }, 'compute');
    btn.addEventListener('click', () => {
      const prog = progressBox('patch');
      clear(el).append(prog.el);
      ctx.guard(getAsync(repoPath(name, `blz/patch-report?from=${enc(p.digest)}&to=${enc(v.digest)}`), { onProgress: prog.update, signal: ctx.signal })
        .then((r) => { p.patch_bytes = r.patch_bytes; renderPatch(v, el); })
        .catch((e) => { if (e.name !== 'AbortError') clear(el).append(errorBox(e)); }));
    });
    el.append('not computed yet ', btn, ' ', from);
  }
}
