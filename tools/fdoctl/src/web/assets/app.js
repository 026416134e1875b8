// fdoctl web: the page's views, drawn from the JSON API (web_app.h) with
// Chart.js (Debian's libjs-chart.js). Routes live in the URL's hash:
//   #/                         programs and profiles
//   #/profile/PK[/vN]          a profile's functions by count (and sampled time share)
//   #/profile/PK/history       versions with the reason for each rewrite
//   #/profile/PK/diff/A/B      what changed between two versions
//   #/profile/PK/function/NAME a function's IR, each block shaded by its count
//   #/program/IK               stage timeline and key lineage (IK -> VK -> CK)
'use strict';

const main = document.getElementById('main');
const charts = [];
const pendingCharts = []; // drawn once their canvas is in the page
const hasCharts = typeof window.Chart === 'function';
if (hasCharts) {
  Chart.defaults.animation = false; // screenshots and tests see the final picture
  Chart.defaults.font.size = 12;
}

// --- small DOM helpers -------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'style') Object.assign(el.style, v); // CSSOM: the CSP allows no inline style attribute
    else if (k.startsWith('data-')) el.setAttribute(k, v);
    else el[k] = v;
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const short = (k, n = 16) => (k ? String(k).slice(0, n) : '');
const fmtInt = (n) => (n === undefined || n === null ? '' : Number(n).toLocaleString('en-US'));
const pct = (x) => (x * 100).toFixed(1) + '%';
function fmtNs(ns) {
  if (ns === undefined || ns === null) return '';
  if (ns >= 1e9) return (ns / 1e9).toFixed(2) + ' s';
  if (ns >= 1e6) return (ns / 1e6).toFixed(2) + ' ms';
  if (ns >= 1e3) return (ns / 1e3).toFixed(1) + ' µs';
  return ns + ' ns';
}
function keyLink(kind, key, text) {
  return h('a', { class: 'key', href: `#/${kind}/${key}`, title: key }, text || short(key));
}
function table(headers, rows, opts = {}) {
  const head = h('tr', {}, headers.map((c) => h('th', { class: c.num ? 'num' : '' }, c.label || c)));
  const body = rows.map((r) =>
    h('tr', {}, r.map((cell, i) => h('td', { class: headers[i] && headers[i].num ? 'num' : '' }, cell))));
  return h('table', { id: opts.id, class: opts.class }, h('thead', {}, head), h('tbody', {}, body));
}
function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}
function chartBox(id, height, config) {
  const box = h('div', { class: 'chart', style: { height: `${height}px` } });
  if (!hasCharts) {
    box.append(h('p', { class: 'muted' },
      'charts need Chart.js (apt-get install libjs-chart.js, or fdoctl web --chartjs-dir DIR)'));
    return box;
  }
  const canvas = h('canvas', { id });
  box.append(canvas);
  pendingCharts.push([canvas, config]);
  return box;
}
// Colour for a heat in 0..1: pale yellow -> red.
function heat(t) {
  const x = Math.max(0, Math.min(1, t));
  return `hsl(${50 - 50 * x}, 95%, ${92 - 42 * x}%)`;
}
// The second shading, for sampled time: blue, apart from the counts' heat.
function sampleHeat(t) {
  const x = Math.max(0, Math.min(1, t));
  return `hsl(215, 85%, ${94 - 50 * x}%)`;
}
// A block's sampled share and the samples of every other event.
function sampledText(b, clock) {
  const parts = [];
  if (b.sample_share !== null) parts.push(`${(b.sample_share * 100).toFixed(1)}% of samples`);
  for (const [event, n] of Object.entries(b.samples || {})) if (event !== clock) parts.push(`${event} ${fmtInt(n)}`);
  return parts.join(' · ');
}
// A stable colour per label (profile version and mode).
const palette = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1',
  '#ff9da7', '#9c755f', '#bab0ac'];
function colourFor(map, label) {
  if (!map.has(label)) map.set(label, palette[map.size % palette.length]);
  return map.get(label);
}

// The run's API token, from the URL fdoctl web printed (?token=...).
const token = new URLSearchParams(location.search).get('token') || '';

async function api(path) {
  const res = await fetch('/api' + path, { headers: { Accept: 'application/json', 'X-Fdo-Token': token } });
  let doc;
  try { doc = await res.json(); } catch (e) { doc = { error: `HTTP ${res.status}` }; }
  if (!res.ok) throw new Error(doc.error || `HTTP ${res.status}`);
  return doc;
}

function crumbs(...items) {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren(...items.flatMap((it, i) => [i ? h('span', { class: 'muted' }, '›') : null,
    it.href ? h('a', { href: it.href }, it.text) : h('span', {}, it.text)]).filter(Boolean));
}

// --- views -------------------------------------------------------------------
async function overview() {
  crumbs({ text: 'overview' });
  const doc = await api('/overview');
  document.getElementById('source').textContent = doc.source;
  const out = [h('h1', {}, 'Programs and profiles')];
  out.push(h('h2', {}, 'Programs'));
  if (doc.programs === null) {
    out.push(h('p', { class: 'note' }, doc.programs_note));
  } else if (doc.programs.length === 0) {
    out.push(h('p', { class: 'muted' }, 'no programs registered yet (fdoctl run FILE --entry NAME)'));
  } else {
    out.push(table(['name', 'program (IK)', 'profile (PK)', { label: 'bytes', num: true }, 'first seen', 'last used'],
      doc.programs.map((p) => [h('a', { href: `#/program/${p.program}` }, p.name), keyLink('program', p.program),
        p.profile_key ? keyLink('profile', p.profile_key) : '-', fmtInt(p.size), p.first_seen, p.last_used]),
      { id: 'programs' }));
  }
  out.push(h('h2', {}, 'Profiles'));
  if (doc.profiles.length === 0) out.push(h('p', { class: 'muted' }, 'no profiles yet'));
  else {
    out.push(table(['profile (PK)', 'programs', { label: 'version', num: true }, 'pinned',
      { label: 'functions', num: true }, 'updated', ''],
    doc.profiles.map((p) => [keyLink('profile', p.profile_key), (p.programs || []).join(', ') || '-',
      p.version ? 'v' + p.version : 'none', p.pinned ? h('span', { class: 'badge pinned' }, 'pinned') : 'no',
      fmtInt(p.functions), p.updated_at, h('a', { href: `#/profile/${p.profile_key}/history` }, 'history')]),
    { id: 'profiles' }));
  }
  return out;
}

async function profile(pk, version) {
  const doc = await api(`/profile/${pk}` + (version ? `?version=${version}` : ''));
  crumbs({ text: 'overview', href: '#/' }, { text: 'profile ' + short(pk) }, { text: 'v' + doc.version });
  const fns = doc.functions;
  const sampled = doc.sampled_figures || [];
  const out = [h('h1', {}, `Profile ${short(pk)} — version ${doc.version}`)];
  out.push(facts([
    ['profile key', h('span', { class: 'key' }, pk)],
    ['version', [`v${doc.version} `, doc.pinned ? h('span', { class: 'badge pinned' }, 'pinned') : null]],
    ['reason', doc.reason], ['written', doc.created_at],
    ['counts', fmtInt(doc.total)],
    ['knobs', Object.entries(doc.knobs).map(([k, v]) => `${k}=${v === null ? 'default' : v}`).join(' ')],
    ['see also', [h('a', { href: `#/profile/${pk}/history` }, 'version history'),
      doc.version > 1 ? [' · ', h('a', { href: `#/profile/${pk}/diff/${doc.version - 1}/${doc.version}` },
        `diff v${doc.version - 1} → v${doc.version}`)] : null]],
  ]));
  if (!sampled.includes('time_share'))
    out.push(h('p', { class: 'muted' }, 'No sampled time shares in this version: functions are ranked by ' +
      'instrumentation counts. Profiles from sampled stages also show each function\'s share of time and misses.'));
  const top = fns.slice(0, 30);
  const datasets = [{ label: 'share of counts', data: top.map((f) => f.share * 100),
    backgroundColor: top.map((f) => heat(f.share / (top[0] ? top[0].share || 1 : 1))), xAxisID: 'x' }];
  if (sampled.includes('time_share'))
    datasets.push({ label: 'share of time', data: top.map((f) => (f.sampled.time_share || 0) * 100),
      backgroundColor: '#4e79a7', xAxisID: 'x' });
  out.push(h('h2', {}, 'Functions by count (hottest first)'));
  out.push(h('p', { class: 'muted' }, 'Click a bar or a name for the function\'s IR with each block\'s count.'));
  const fnHref = (f) => `#/profile/${pk}/function/${encodeURIComponent(f.name)}`;
  out.push(chartBox('functions-chart', Math.max(120, 28 * top.length + 60), {
    type: 'bar',
    data: { labels: top.map((f) => f.display_name), datasets },
    options: { indexAxis: 'y', maintainAspectRatio: false,
      onClick: (ev, elements) => { if (elements.length) location.hash = fnHref(top[elements[0].index]); },
      scales: { x: { title: { display: true, text: '% of the profile' }, beginAtZero: true } },
      plugins: { legend: { display: datasets.length > 1 } } },
  }));
  const headers = ['function', { label: 'count', num: true }, { label: 'share', num: true },
    ...sampled.map((s) => ({ label: s.replace(/_/g, ' '), num: true })), 'counters (heat per counter)', 'unpredictable'];
  out.push(table(headers, fns.map((f) => {
    const max = Math.max(1, ...f.counts);
    const shown = f.counts.slice(0, 48);
    const strip = h('div', { class: 'heat' }, shown.map((c, i) =>
      h('span', { style: { background: heat(c / max) }, title: `counter ${i}: ${fmtInt(c)}` }, fmtInt(c))),
    f.counts.length > shown.length ? h('span', { class: 'muted' }, `+${f.counts.length - shown.length} more`) : null);
    return [h('span', { title: f.name }, h('a', { href: fnHref(f), class: 'fn-link' }, f.display_name),
      f.display_name !== f.name ? h('div', { class: 'muted key' }, f.name) : null),
      fmtInt(f.total), pct(f.share),
      ...sampled.map((s) => (s in f.sampled ? (s.includes('share') ? pct(f.sampled[s]) : fmtInt(f.sampled[s])) : '')),
      strip, f.unpredictable.join(', ') || '-'];
  }), { id: 'functions' }));
  return out;
}

async function history(pk) {
  crumbs({ text: 'overview', href: '#/' }, { text: 'profile ' + short(pk), href: `#/profile/${pk}` }, { text: 'history' });
  const doc = await api(`/profile/${pk}/history`);
  const out = [h('h1', {}, `Version history of ${short(pk)}`)];
  out.push(facts([['profile key', h('span', { class: 'key' }, pk)], ['current', 'v' + doc.current_version],
    ['pinned', doc.pinned ? 'yes' : 'no']]));
  out.push(table([{ label: 'version', num: true }, 'written', 'reason', { label: 'stage', num: true }, 'source',
    'digest', ''],
  doc.versions.map((v, i) => [h('a', { href: `#/profile/${pk}/v${v.version}` }, 'v' + v.version), v.created_at,
    v.reason, v.stage === undefined ? '' : v.stage, v.source || '', h('span', { class: 'key' }, short(v.digest, 12)),
    i > 0 ? h('a', { href: `#/profile/${pk}/diff/${doc.versions[i - 1].version}/${v.version}` },
      `diff from v${doc.versions[i - 1].version}`) : '']), { id: 'history' }));
  return out;
}

async function diff(pk, v1, v2) {
  crumbs({ text: 'overview', href: '#/' }, { text: 'profile ' + short(pk), href: `#/profile/${pk}` },
    { text: `diff v${v1} → v${v2}` });
  const doc = await api(`/profile/${pk}/diff?v1=${v1}&v2=${v2}`);
  const out = [h('h1', {}, `Profile ${short(pk)}: v${v1} → v${v2}`)];
  out.push(facts([
    ['from', `v${doc.from.version} (${doc.from.reason})`], ['to', `v${doc.to.version} (${doc.to.reason})`],
    ['functions', `${doc.summary.changed} changed, ${doc.summary.added} added, ${doc.summary.removed} removed, ` +
      `${doc.summary.unchanged} unchanged`],
    ['compiler sees', doc.compile_affecting_equal ? 'the same profile (no recompile)' : 'a different profile'],
    ['knobs', doc.knobs.length ? doc.knobs.map((k) => `${k.knob}: ${k.before ?? 'unset'} → ${k.after ?? 'unset'}`).join('; ') : 'unchanged'],
  ]));
  const fns = doc.functions.filter((f) => f.change !== 'unchanged').slice(0, 30);
  const name = (f) => f.source_name || f.name;
  if (fns.length) {
    out.push(chartBox('diff-chart', Math.max(120, 34 * fns.length + 60), {
      type: 'bar',
      data: { labels: fns.map(name), datasets: [
        { label: `v${v1} share`, data: fns.map((f) => f.share_before * 100), backgroundColor: '#bab0ac' },
        { label: `v${v2} share`, data: fns.map((f) => f.share_after * 100), backgroundColor: '#e15759' }] },
      options: { indexAxis: 'y', maintainAspectRatio: false,
        scales: { x: { beginAtZero: true, title: { display: true, text: '% of all counts' } } } },
    }));
  }
  out.push(table(['function', 'change', { label: `count v${v1}`, num: true }, { label: `count v${v2}`, num: true },
    { label: 'share', num: true }, { label: 'counters moved', num: true }, 'largest moves'],
  doc.functions.map((f) => [name(f), f.change, fmtInt(f.total_before), fmtInt(f.total_after),
    `${pct(f.share_before)} → ${pct(f.share_after)}`, f.weights_changed,
    (f.counters || []).slice(0, 4).map((c) => `#${c.index}: ${pct(c.weight_before)}→${pct(c.weight_after)}`).join(', ')]),
  { id: 'diff' }));
  return out;
}

function lineage(doc) {
  // IK -> the VK the first stage's output was stored under -> one CK per
  // profile version and mode, in first-use order.
  const vks = new Map(); const cks = new Map();
  for (const r of doc.records) {
    const sk = r.storage_key || ''; const ck = r.cache_key || '';
    if (sk && sk !== ck) {
      if (!vks.has(sk)) vks.set(sk, { stages: 0 });
      vks.get(sk).stages++;
    }
    if (!ck) continue;
    if (!cks.has(ck)) cks.set(ck, { versions: new Set(), mode: r.mode, stages: 0, via: new Set() });
    const u = cks.get(ck);
    u.versions.add(r.profile_version); u.mode = r.mode; u.stages++;
    if (sk && sk !== ck) u.via.add(sk);
  }
  const box = (cls, kind, key, ...lines) => h('div', { class: `box ${cls}`, title: key },
    h('b', {}, kind), h('span', { class: 'key' }, short(key, 8) + '…' + (key.length > 64 ? key.slice(64, 80) : '')),
    lines.map((l) => h('div', { class: 'muted' }, l)));
  const cols = [h('div', { class: 'col' }, box('ik', 'IK (program + compiler identity)', doc.program))];
  if (vks.size) {
    cols.push(h('span', { class: 'arrow' }, '→'));
    cols.push(h('div', { class: 'col' }, [...vks].map(([k, u]) =>
      box('vk', 'VK (first stage, before the profile key was known)', k, `served ${u.stages} stage(s)`))));
  }
  cols.push(h('span', { class: 'arrow' }, '→'));
  cols.push(h('div', { class: 'col' }, [...cks].map(([k, u]) =>
    box('ck', `CK profile ${[...u.versions].map((v) => (v < 0 ? '?' : 'v' + v)).join(',')} ${u.mode}`, k,
      `${u.stages} stage(s)`, u.via.size ? 'found under the VK (CK → VK mapping)' : null))));
  return h('div', { class: 'lineage', id: 'lineage' }, cols);
}

async function program(ik) {
  const doc = await api(`/program/${ik}`);
  crumbs({ text: 'overview', href: '#/' }, { text: 'program ' + (doc.name || short(ik)) });
  const out = [h('h1', {}, `Program ${doc.name || short(ik)}`)];
  out.push(facts([['program (IK)', h('span', { class: 'key' }, ik)],
    ['profile (PK)', doc.profile_key ? keyLink('profile', doc.profile_key, doc.profile_key) : 'not known yet'],
    ['stages recorded', `${doc.records.length} (the daemon keeps the last ${doc.records_kept || doc.records.length} in memory)`]]));
  if (!doc.records.length) {
    out.push(h('p', { class: 'note' }, 'no stages recorded for this program since fdod started'));
    return out;
  }
  const withExec = doc.records.some((r) => typeof r.exec_ns === 'number');
  const colours = new Map();
  // The variant the live A/B guard ran (role and name, docs/guard.md), else
  // the compile mode for records that name none (compile-only, older fdod).
  const variantOf = (r) => (r.variant ? `${r.variant.role}${r.variant.name ? ': ' + r.variant.name : ''}` : r.mode);
  const label = (r) => `v${r.profile_version < 0 ? '?' : r.profile_version} ${variantOf(r)}`;
  const groups = [...new Set(doc.records.map(label))];
  const stages = doc.records.map((r) => String(r.stage));
  const datasets = groups.map((g) => ({
    type: 'bar', label: g, backgroundColor: colourFor(colours, g), stack: 'time',
    data: doc.records.map((r) => (label(r) === g ? (withExec ? (r.exec_ns || 0) / 1e6 : r.compile_ms || 0) : null)),
  }));
  datasets.push({ type: 'scatter', label: 'compile event', pointStyle: 'triangle', pointRadius: 7,
    backgroundColor: '#222',
    data: doc.records.map((r, i) => (r.compile_ms > 0 ? { x: stages[i], y: r.compile_ms } : null)).filter(Boolean),
    yAxisID: 'compile' });
  // The lifecycle's transitions (docs/lifecycle.md) at the stages that made
  // them, on the axis: where the program moved from profiling to optimized
  // code, into and out of trials, re-profiled.
  const transitions = ((doc.lifecycle && doc.lifecycle.history) || [])
    .filter((t) => t.stage !== null && stages.includes(String(t.stage)));
  if (transitions.length) {
    datasets.push({ type: 'scatter', label: 'lifecycle transition', pointStyle: 'rectRot', pointRadius: 6,
      backgroundColor: '#c0392b',
      data: transitions.map((t) => ({ x: String(t.stage), y: 0, transition: `${t.from} → ${t.to} (${t.cause})` })) });
  }
  out.push(h('h2', {}, 'Stage timeline'));
  out.push(h('p', { class: 'muted' }, withExec
    ? 'Bars: execution time per stage, coloured by the profile version and the variant it ran (the A/B guard\'s ' +
      'role and variant name; the compile mode where no variant was recorded); triangles: compile events (right axis).'
    : 'Bars: compile time per stage, coloured by the profile version and variant it ran; triangles: compile events. ' +
      'This fdod does not report per-stage execution times in cache.explain.'));
  out.push(chartBox('timeline-chart', 300, {
    data: { labels: stages, datasets },
    options: { maintainAspectRatio: false, scales: {
      x: { stacked: true, title: { display: true, text: 'stage' } },
      y: { stacked: true, beginAtZero: true, title: { display: true, text: withExec ? 'exec ms' : 'compile ms' } },
      compile: { position: 'right', beginAtZero: true, grid: { drawOnChartArea: false },
        title: { display: true, text: 'compile ms' } } } },
  }));
  out.push(h('ul', { class: 'legend', id: 'timeline-legend' }, groups.map((g) =>
    h('li', { 'data-group': g }, h('span', { class: 'swatch', style: { background: colourFor(colours, g) } }), g))));
  out.push(...lifecycleView(doc.lifecycle));
  out.push(h('h2', {}, 'Cache key lineage'));
  out.push(lineage(doc));
  out.push(h('h2', {}, 'Stages'));
  out.push(table([{ label: 'stage', num: true }, 'time', 'outcome', 'reason', 'profile', 'mode', 'variant',
    ...(withExec ? [{ label: 'exec', num: true }] : []), { label: 'compile ms', num: true }, 'why'],
  doc.records.map((r) => [r.stage, r.time, r.outcome, r.reason,
    r.from_version >= 0 && r.from_version !== r.profile_version ? `v${r.from_version}→v${r.profile_version}` : 'v' + r.profile_version,
    r.mode, r.variant ? h('span', { class: 'variant' }, variantOf(r)) : '-',
    ...(withExec ? [fmtNs(r.exec_ns)] : []), r.compile_ms > 0 ? h('span', { class: 'compiled' }, '▲ ' + r.compile_ms.toFixed(1)) : '-',
    r.detail + (r.error ? ` [error: ${r.error}]` : '')]), { id: 'stages' }));
  return out;
}

// The program's lifecycle (cache.explain's lifecycle; docs/lifecycle.md):
// the phase it is in and the transitions that brought it there.
function lifecycleView(lc) {
  const out = [h('h2', {}, 'Lifecycle')];
  if (!lc) {
    out.push(h('p', { class: 'note' }, 'no stage of this program\'s profile ran under this fdod yet'));
    return out;
  }
  out.push(facts([
    ['phase', h('span', { class: 'phase', id: 'lifecycle-phase' }, lc.phase + (lc.since_stage === null ? '' : ` since stage ${lc.since_stage}`))],
    ['rewrites in the last hour', String(lc.rewrites_last_hour)],
    ['stages on an earlier build', String(lc.stale_stages)],
    ...(lc.retry_in_stages === undefined ? [] : [['retry of the profile\'s build', `in ${lc.retry_in_stages} stage(s)`]]),
  ]));
  out.push(table([{ label: 'stage', num: true }, { label: 'version', num: true }, 'time', 'from', 'to', 'cause', 'detail'],
    lc.history.map((t) => [t.stage === null ? '-' : t.stage, 'v' + t.version, t.time, t.from, t.to,
      h('span', { class: 'cause' }, t.cause), t.detail]), { id: 'lifecycle' }));
  return out;
}

async function fn(pk, name) {
  crumbs({ text: 'overview', href: '#/' }, { text: 'profile ' + short(pk), href: `#/profile/${pk}` },
    { text: 'function' });
  const doc = await api(`/profile/${pk}/annotate?function=${encodeURIComponent(name)}`);
  const out = [];
  for (const f of doc.functions) {
    out.push(h('h1', {}, `Function ${f.source_name}`));
    out.push(facts([
      ['program', [h('a', { href: `#/program/${doc.program}` }, doc.program_name || short(doc.program)), ' ',
        h('span', { class: 'key muted' }, short(doc.program))]],
      ['profile', [keyLink('profile', doc.profile_key), ` v${doc.profile_version}`]],
      ['canonical name', h('span', { class: 'key' }, f.pgo_name)],
      ['entry count', f.entry_count === null ? 'no counts in the profile' : h('span', { id: 'entry-count' }, fmtInt(f.entry_count))],
    ]));
    if (f.approximate) out.push(h('p', { class: 'note' }, 'Counts past 2^32: LLVM scaled the branch weights, so block counts are proportional, not exact.'));
    out.push(h('p', { class: 'muted' }, 'The IR as the profile\'s counters saw it (after the pre-inliner and early cleanup), ' +
      'each block shaded by its execution count; "per call" is the count over the entry count.' +
      (doc.sampling ? ` The blue bar at each block's left is its share of the profile's ${fmtInt(doc.sampling.samples)} ` +
        `${doc.sampling.event} samples in program code (sampled stages), with misses where a PMU counted them; ` +
        'code inlined from another function counts for that function.' : '')));
    const unplaced = Object.entries(f.unplaced_samples || {});
    if (unplaced.length) out.push(h('p', { class: 'note', id: 'unplaced-samples' }, unplaced.map(([e, n]) => `${fmtInt(n)} ${e}`).join(', ') +
      ' samples fell in canonical blocks not shown here (folded away before PGO use).'));
    const max = Math.max(1, ...f.blocks.map((b) => b.count || 0));
    const maxShare = Math.max(1e-9, ...f.blocks.map((b) => b.sample_share || 0));
    const clock = doc.sampling ? doc.sampling.event : '';
    out.push(h('div', { class: 'ir', id: 'annotated-ir' },
      h('div', { class: 'sig' }, f.signature),
      f.blocks.map((b) => {
        const sampled = sampledText(b, clock);
        return h('div', { class: 'block', 'data-label': b.label, 'data-count': b.count === null ? '' : String(b.count),
          'data-sample-share': b.sample_share === null ? '' : String(b.sample_share),
          style: { background: b.count === null ? '#fff' : heat(b.count / max),
            borderLeft: `.6em solid ${b.sample_share === null ? 'transparent' : sampleHeat(b.sample_share / maxShare)}` } },
        h('div', { class: 'label' }, h('b', {}, b.label + ':'), b.count === null ? h('span', { class: 'muted' }, ' count unknown')
          : h('span', { class: 'count' }, ` count ${fmtInt(b.count)}` + (b.per_call === null ? '' : ` · ${b.per_call.toFixed(2)} per call`)),
        sampled ? h('span', { class: 'samples' }, sampled) : null),
        b.lines.map((l) => h('div', { class: 'line' }, l)));
      }),
      h('div', { class: 'sig' }, '}')));
  }
  // LLVM's warnings, unreadable sample tallies, samples of functions not shown.
  for (const d of doc.diagnostics) out.push(h('p', { class: 'note' }, d));
  return out;
}

// --- router ------------------------------------------------------------------
const KEY = '([0-9a-f]{64})';
const routes = [
  [new RegExp(`^/profile/${KEY}/history$`), (m) => history(m[1]), 'history'],
  [new RegExp(`^/profile/${KEY}/diff/(\\d+)/(\\d+)$`), (m) => diff(m[1], m[2], m[3]), 'diff'],
  [new RegExp(`^/profile/${KEY}/function/(.+)$`), (m) => fn(m[1], m[2]), 'function'],
  [new RegExp(`^/profile/${KEY}(?:/v(\\d+))?$`), (m) => profile(m[1], m[2]), 'profile'],
  [new RegExp(`^/program/${KEY}$`), (m) => program(m[1]), 'program'],
  [/^\/?$/, () => overview(), 'overview'],
];

async function render() {
  document.body.dataset.ready = '0';
  while (charts.length) charts.pop().destroy();
  const path = decodeURIComponent(location.hash.replace(/^#/, '')) || '/';
  const route = routes.find(([re]) => re.test(path));
  try {
    if (!route) throw new Error(`no view ${path}`);
    document.body.dataset.view = route[2];
    pendingCharts.length = 0;
    main.replaceChildren(...(await route[1](path.match(route[0]))));
    for (const [canvas, config] of pendingCharts.splice(0)) charts.push(new Chart(canvas, config));
  } catch (e) {
    main.replaceChildren(h('div', { class: 'error', id: 'error' }, String(e.message || e)));
  }
  await new Promise((r) => setTimeout(r, 0)); // let the charts draw
  document.body.dataset.ready = '1';
}
window.addEventListener('hashchange', render);
if (!document.getElementById('source').textContent)
  api('/overview').then((d) => { document.getElementById('source').textContent = d.source; }).catch(() => {});
render();
