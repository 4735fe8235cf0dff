// Viewer entry point: finds traces (from `d9ctl serve`'s API, the URL hash,
// a file picker or a drop), decodes them and wires timeline, panels and
// flamegraph together. State for tests and benchmarks is in window.d9.

import { decodeTrace, decompressFile, concatBytes } from './decode.js';
import { buildModel, formatCount, formatDur, workerName } from './model.js';
import { Timeline } from './timeline.js';
import { TaskChart } from './tasks.js';
import { Flamegraph, buildFlameTree } from './flame.js';
import { renderDetails, renderNavigators } from './panels.js';
import { fillSegmentInfo } from './listing_info.js';
import { installSegmentSort, sortSegments, sortedByInfo } from './listing_sort.js';

const $ = (s) => document.querySelector(s);
window.d9 = { state: 'idle', timings: {} };

function setState(state) {
  window.d9.state = state;
  document.body.dataset.state = state;
}

function status(text) { $('#status').textContent = text; }

function showError(text) {
  const e = $('#error');
  e.textContent = text;
  e.hidden = false;
  status('');
  setState('error');
}

const nextFrame = () => new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));

// Decodes raw bytes (already decompressed) and shows them.
async function openBytes(bytes, what, t0) {
  const T = window.d9.timings;
  status(`decoding ${what} (${(bytes.length / 1e6).toFixed(1)} MB)…`);
  await nextFrame();
  let t = performance.now();
  let decoded;
  try {
    decoded = decodeTrace(bytes);
  } catch (e) {
    showError(`Cannot open ${what}: ${e.message}`);
    return;
  }
  T.decode = performance.now() - t;
  t = performance.now();
  const m = buildModel(decoded);
  T.model = performance.now() - t;
  if (!m.polls.n && !decoded.park.length && !decoded.wake.length) {
    showError(`Cannot open ${what}: no poll, park or wake events in this trace.`);
    return;
  }
  t = performance.now();
  show(m);
  T.render = performance.now() - t;
  T.total = performance.now() - t0;
  window.d9.events = decoded.events;
  status(`${what}: ${formatCount(decoded.events)} events, ${formatCount(m.polls.n)} polls, ${formatDur(m.t1 - m.t0)}` +
    (decoded.truncated ? ' (truncated tail ignored)' : '') + ` · opened in ${(T.total / 1000).toFixed(2)} s`);
  setState('ready');
}

async function openSegments(paths) {
  const t0 = performance.now();
  setState('loading');
  $('#error').hidden = true;
  status(`fetching ${paths.length} segment(s)…`);
  const q = paths.map((p) => `seg=${encodeURIComponent(p)}`).join('&');
  let bytes;
  try {
    const r = await fetch(`/api/trace?${q}`);
    if (!r.ok) throw new Error(`server said ${r.status}: ${(await r.text()).trim()}`);
    bytes = new Uint8Array(await r.arrayBuffer());
  } catch (e) {
    showError(`Cannot open ${paths.join(', ')}: ${e.message}`);
    return;
  }
  window.d9.timings.fetch = performance.now() - t0;
  await openBytes(bytes, paths.length === 1 ? paths[0] : `${paths.length} segments`, t0);
}

async function openFiles(files) {
  const t0 = performance.now();
  setState('loading');
  $('#error').hidden = true;
  const parts = [];
  try {
    for (const f of files) parts.push(await decompressFile(f.name, new Uint8Array(await f.arrayBuffer())));
  } catch (e) {
    showError(`Cannot open ${[...files].map((f) => f.name).join(', ')}: ${e.message}`);
    return;
  }
  await openBytes(concatBytes(parts), files.length === 1 ? files[0].name : `${files.length} files`, t0);
}

let current = null;

function show(m) {
  $('#browser').hidden = true;
  $('#main').hidden = false;
  // a fresh canvas drops the previous trace's listeners
  if (current) {
    for (const id of ['#timeline', '#tasks-chart']) { const old = $(id); old.replaceWith(old.cloneNode()); }
    for (const e of document.querySelectorAll('.tl-tip')) e.remove();
  }
  const canvas = $('#timeline');
  const flame = current?.flame || new Flamegraph($('#flame'));
  const refreshFlame = () => {
    const [a, b] = tl.range();
    const task = $('#flame-task').value.trim();
    const f = { t0: a, t1: b, worker: $('#flame-worker').value, task: task ? Number(task) : NaN, source: $('#flame-source').value };
    const tree = buildFlameTree(m, f);
    flame.setTree(tree);
    $('#flame-info').textContent = `${tree.value} samples in ${formatDur(b - a)}` + (tree.empty ? ` (${tree.empty} more without a stack)` : '');
  };
  let flameTimer = 0, chart = null;
  const tl = new Timeline(canvas, m, {
    onSelectPoll: (p) => selectPoll(p, false),
    onRangeChange: () => { chart?.requestDraw(); clearTimeout(flameTimer); flameTimer = setTimeout(refreshFlame, 120); },
  });
  chart = new TaskChart($('#tasks-chart'), m, tl);
  const selectPoll = (p, zoom, stay = false) => {
    if (tl.task?.id !== m.polls.task[p]) tl.setTaskLane(p);
    if (zoom) tl.showPoll(p);
    else { tl.selectedPoll = p; tl.requestDraw(); }
    renderDetails($('#tab-details'), m, p);
    if (!stay) selectTab('details');
    window.d9.selectedPoll = p;
  };
  const ws = $('#flame-worker');
  ws.innerHTML = '<option value="all">all workers</option>' + m.workers.map((w) => `<option value="${w}">${workerName(w)}</option>`).join('');
  renderNavigators($('#side'), m);
  current = { canvas, flame, tl, m, selectPoll, refreshFlame };
  window.d9.model = m;
  window.d9.timeline = tl;
  window.d9.taskChart = chart;
  window.d9.selectPoll = selectPoll;
  refreshFlame();
}

// Prev/Next through a navigator's list (longest polls, blocking calls, wake
// delays): the list stays open, the timeline zooms to each poll in turn.
function stepList(tab, step) {
  const items = [...tab.querySelectorAll('li[data-poll]')];
  if (!items.length || !current) return;
  const at = items.findIndex((li) => li.classList.contains('current'));
  const next = Math.min(items.length - 1, Math.max(0, at < 0 ? (step > 0 ? 0 : items.length - 1) : at + step));
  items.forEach((li, i) => li.classList.toggle('current', i === next));
  items[next].scrollIntoView({ block: 'nearest' });
  tab.querySelector('.poi-pos').textContent = `${next + 1}/${items.length}`;
  current.selectPoll(+items[next].dataset.poll, true, true);
}

function selectTab(name) {
  for (const b of document.querySelectorAll('#tabs button')) b.classList.toggle('active', b.dataset.tab === name);
  for (const t of document.querySelectorAll('.tab')) t.classList.toggle('active', t.id === `tab-${name}`);
}

function installUi() {
  $('#tabs').addEventListener('click', (e) => { if (e.target.dataset.tab) selectTab(e.target.dataset.tab); });
  $('#side').addEventListener('click', (e) => {
    const stepBtn = e.target.closest('[data-step]');
    if (stepBtn) { stepList(stepBtn.closest('.tab'), +stepBtn.dataset.step); return; }
    const li = e.target.closest('[data-poll]');
    if (li && current) current.selectPoll(+li.dataset.poll, true);
    const fb = e.target.closest('[data-flame-task]');
    if (fb && current) { $('#flame-task').value = fb.dataset.flameTask; current.refreshFlame(); }
  });
  for (const id of ['#flame-source', '#flame-worker', '#flame-task']) $(id).addEventListener('change', () => current?.refreshFlame());
  $('#file-input').addEventListener('change', (e) => { if (e.target.files.length) openFiles([...e.target.files]); });
  $('#show-browser').addEventListener('click', () => listSegments());
  $('#segment-filter').addEventListener('input', filterSegments);
  installSegmentSort($('#segments'));
  $('#open-selected').addEventListener('click', () => {
    const paths = [...document.querySelectorAll('#segments input:checked')].map((c) => c.value);
    if (!paths.length) return;
    const hash = paths.map((p) => `seg=${encodeURIComponent(p)}`).join('&');
    if (location.hash.slice(1) === hash) openFromHash(); // no hashchange event for the same hash
    else location.hash = hash;
  });
  document.addEventListener('dragover', (e) => { e.preventDefault(); document.body.classList.add('dragging'); });
  document.addEventListener('dragleave', (e) => { if (!e.relatedTarget) document.body.classList.remove('dragging'); });
  document.addEventListener('drop', (e) => {
    e.preventDefault();
    document.body.classList.remove('dragging');
    if (e.dataTransfer.files.length) openFiles([...e.dataTransfer.files]);
  });
  window.addEventListener('hashchange', openFromHash);
  document.addEventListener('keydown', (e) => {
    if (e.target.closest('input, select, textarea') || (e.key !== 'n' && e.key !== 'p')) return;
    const tab = document.querySelector('.tab.active');
    if (tab?.querySelector('.poi-nav')) stepList(tab, e.key === 'n' ? 1 : -1);
  });
}

async function listSegments() {
  $('#main').hidden = true;
  $('#browser').hidden = false;
  let list;
  try {
    const r = await fetch('/api/list');
    if (!r.ok) throw new Error(`server said ${r.status}`);
    list = await r.json();
  } catch (e) {
    $('#segments tbody').innerHTML = `<tr><td colspan="9" class="hint">No recording list (${e.message}); open or drop a file.</td></tr>`;
    return;
  }
  const segs = list.segments.sort((a, b) => (a.service + a.instance).localeCompare(b.service + b.instance) || (a.index ?? 0) - (b.index ?? 0) || a.path.localeCompare(b.path));
  const tb = $('#segments tbody');
  tb.innerHTML = '';
  const infoRows = [];
  for (const s of segs) {
    const tr = document.createElement('tr');
    const pid = /^(\d+)-/.exec(s.instance || '')?.[1] ?? '';
    const cells = [s.service, pid, s.instance + (s.boot ? ` / ${s.boot}` : ''), s.path.split('/').pop() + (s.active ? ' (recording)' : ''), '…', '…', `${(s.size / 1e6).toFixed(2)} MB`, new Date(s.mtime * 1000).toISOString().slice(0, 19).replace('T', ' ')];
    const cb = document.createElement('input');
    cb.type = 'checkbox';
    cb.value = s.path;
    const td0 = document.createElement('td');
    td0.append(cb);
    const tds = cells.map((c) => { const td = document.createElement('td'); td.textContent = c; return td; });
    tds[4].className = 'seg-start';
    tds[5].className = 'seg-duration';
    tr.append(td0, ...tds);
    Object.assign(tr.dataset, { path: s.path, order: String(tb.rows.length), service: s.service, pid, instance: s.instance, index: String(s.index ?? ''), size: String(s.size), mtime: String(s.mtime) });
    tb.append(tr);
    infoRows.push({ path: s.path, start: tds[4], duration: tds[5] });
  }
  if (!segs.length) tb.innerHTML = '<tr><td colspan="9" class="hint">No segments under the served directory.</td></tr>';
  filterSegments();
  sortSegments($('#segments'));
  const filled = () => { filterSegments(); if (sortedByInfo()) sortSegments($('#segments')); };
  fillSegmentInfo(infoRows, filled).then(() => { $('#segments').dataset.infoFilled = String(infoRows.length); });
}

// Rows whose text holds every word of the filter stay visible.
function filterSegments() {
  const words = $('#segment-filter').value.toLowerCase().split(/\s+/).filter(Boolean);
  for (const tr of document.querySelectorAll('#segments tbody tr')) {
    const text = tr.textContent.toLowerCase();
    tr.hidden = !words.every((w) => text.includes(w));
  }
}

function openFromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const segs = params.getAll('seg');
  if (segs.length) openSegments(segs);
  else listSegments();
}

installUi();
openFromHash();
