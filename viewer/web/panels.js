// Side panels: poll details, the navigators (longest polls, blocking calls,
// wake delays, busiest future types) and the summary.

import { formatCount, formatDur, formatTime, lowerBound, pollDurations, pollLabel, summary, symbolizeStack, topK, workerName } from './model.js';

const LIST_LEN = 50;

const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

function kv(rows) {
  return `<dl class="kv">${rows.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${v}</dd>`).join('')}</dl>`;
}

// A navigator list with Prev/Next buttons that step through it (app.js).
function pollList(m, polls, describe) {
  if (!polls.length) return '<p class="hint">None in this trace.</p>';
  return `<div class="poi-nav"><button type="button" data-step="-1" title="previous (p)">◀ Prev</button>` +
    `<button type="button" data-step="1" title="next (n)">Next ▶</button> <span class="poi-pos">–/${polls.length}</span></div>` +
    `<ol>${polls.map((p) => `<li data-poll="${p}">${describe(p)}</li>`).join('')}</ol>`;
}

function shortLabel(s) {
  return s.length > 60 ? '…' + s.slice(-59) : s;
}

export function renderDetails(el, m, p) {
  const P = m.polls, dur = P.end[p] - P.start[p];
  const rows = [
    ['task', esc(P.task[p])],
    ['future type', esc(pollLabel(m, p))],
    ['worker', esc(workerName(P.worker[p]))],
    ['start', esc(formatTime(m, P.start[p]))],
    ['duration', `<b class="poll-duration">${esc(formatDur(dur))}</b>`],
    ['local queue', esc(P.queue[p])],
  ];
  const w = m.wakes.wakeOf[p];
  if (w >= 0) {
    const W = m.d.wake;
    rows.push(['woken by', W.waker[w] ? `task ${esc(W.waker[w])}` : 'outside a task (I/O, timer, other thread)']);
    rows.push(['wake issued on', esc(workerName(W.worker[w]))]);
    rows.push(['wake at', esc(formatTime(m, W.ts[w]))]);
    rows.push(['wake → poll', `<b class="wake-delay">${esc(formatDur(m.wakes.delay[p]))}</b>`]);
  } else {
    rows.push(['woken by', '<span class="hint">no wake recorded before this poll</span>']);
  }
  const samples = m.samples.pollSamples.get(p) || [];
  const S = m.d.sample;
  const depth = (i) => (S.stack[i] >= 0 ? m.d.stacks[S.stack[i]].length : 0);
  // samples with a stack first, CPU before off-CPU, then in time order
  const shown = samples.slice().sort((a, b) => (!depth(a) - !depth(b)) || (S.source[a] - S.source[b]) || (S.ts[a] - S.ts[b])).slice(0, 20);
  let nOff = 0;
  for (const i of samples) nOff += S.source[i] === 1;
  const stacks = shown.map((i) => {
    const off = S.source[i] === 1;
    const frames = depth(i) ? symbolizeStack(m, S.stack[i]) : ['(no stack captured)'];
    const dur = S.dur[i] === S.dur[i] ? ` for ${formatDur(S.dur[i])}` : '';
    return `<div class="${off ? 'offcpu' : 'oncpu'}">${off ? 'off-CPU' : 'CPU'} sample at +${esc(formatDur(S.ts[i] - P.start[p]))}${esc(dur)}</div>` +
      `<pre class="stack">${frames.slice().reverse().map(esc).join('\n')}</pre>`;
  });
  el.innerHTML = `<h3>Poll</h3>${kv(rows)}` +
    `<button type="button" data-flame-task="${P.task[p]}">Flamegraph of task ${esc(P.task[p])}</button>` +
    `<h3>Stacks inside this poll (${samples.length - nOff} CPU, ${nOff} off-CPU${samples.length > shown.length ? `, ${shown.length} shown` : ''})</h3>` +
    (stacks.length ? `<div class="stacks">${stacks.join('')}</div>` : '<p class="hint">No CPU or off-CPU samples fell inside this poll.</p>');
}

export function renderNavigators(root, m) {
  const dur = pollDurations(m);
  const describe = (p) => `<b>${esc(formatDur(dur[p]))}</b> ${esc(workerName(m.polls.worker[p]))} task ${esc(m.polls.task[p])} <span class="hint">${esc(shortLabel(pollLabel(m, p)))}</span>`;
  root.querySelector('#tab-longest').innerHTML = `<h3>Longest polls</h3>${pollList(m, topK(dur, LIST_LEN), describe)}`;

  // Blocking calls: polls that contain off-CPU (scheduler) samples, i.e. the
  // worker thread was switched out while it was supposed to be polling.
  const S = m.d.sample;
  const offPolls = new Map();
  for (const [p, list] of m.samples.pollSamples) {
    let n = 0, t = 0;
    for (const i of list) if (S.source[i] === 1) { n++; if (S.dur[i] === S.dur[i]) t += S.dur[i]; }
    if (n) offPolls.set(p, { n, t });
  }
  const blocking = [...offPolls.keys()].sort((a, b) => (offPolls.get(b).t - offPolls.get(a).t) || (dur[b] - dur[a])).slice(0, LIST_LEN);
  root.querySelector('#tab-blocking').innerHTML = `<h3>Blocking calls (off-CPU inside a poll)</h3>` +
    pollList(m, blocking, (p) => `${describe(p)} <span class="offcpu">${offPolls.get(p).n} off-CPU${offPolls.get(p).t ? ' ' + esc(formatDur(offPolls.get(p).t)) : ''}</span>`);

  renderSchedDelays(root.querySelector('#tab-sched'), m);

  const delays = topK(m.wakes.delay, LIST_LEN);
  root.querySelector('#tab-wakes').innerHTML = `<h3>Largest wake → poll delays</h3>` +
    pollList(m, delays, (p) => `<b>${esc(formatDur(m.wakes.delay[p]))}</b> task ${esc(m.polls.task[p])} on ${esc(workerName(m.polls.worker[p]))} <span class="hint">${esc(shortLabel(pollLabel(m, p)))}</span>`);

  const s = summary(m);
  m.summaryCache = s;
  root.querySelector('#tab-busiest').innerHTML = `<h3>Busiest future types</h3><table><tr><th>future type</th><th class="num">polls</th><th class="num">tasks</th><th class="num">busy</th></tr>` +
    s.types.slice(0, LIST_LEN).map((t) => `<tr><td title="${esc(t.label)}">${esc(shortLabel(t.label))}</td><td class="num">${t.count}</td><td class="num">${t.tasks}</td><td class="num">${esc(formatDur(t.total))}</td></tr>`).join('') + '</table>';
  renderSummary(root.querySelector('#tab-summary'), m, s);
}

// Scheduler delay: how long a worker that was woken waited for a CPU (the
// growth of the kernel's run_delay over a park, WorkerUnparkEvent's
// sched_wait_ns). Each row leads to the first poll the worker ran after it.
function renderSchedDelays(el, m) {
  const K = m.d.park, P = m.polls;
  const waits = new Float64Array(K.length);
  for (let i = 0; i < K.length; i++) waits[i] = !K.park[i] && K.wait[i] > 0 ? K.wait[i] : NaN;
  const rows = [];
  for (const i of topK(waits, LIST_LEN * 2)) {
    const lane = P.lanes.get(K.worker[i]);
    if (!lane) continue;
    const p = lowerBound(P.start, K.ts[i], lane.first, lane.last);
    if (p < lane.last) rows.push([i, p]);
    if (rows.length === LIST_LEN) break;
  }
  const pollOf = new Map(rows.map(([i, p]) => [p, i]));
  el.innerHTML = '<h3>Scheduler delay (a woken worker waiting for a CPU)</h3>' +
    (rows.length ? pollList(m, rows.map(([, p]) => p), (p) => {
      const i = pollOf.get(p);
      return `<b>${esc(formatDur(K.wait[i]))}</b> ${esc(workerName(K.worker[i]))} at ${esc(formatTime(m, K.ts[i]))} <span class="hint">then ${esc(shortLabel(pollLabel(m, p)))}</span>`;
    }) : '<p class="hint">No scheduler wait recorded (needs unpark events with sched_wait_ns).</p>');
}

function renderSummary(el, m, s) {
  const d = m.d;
  const rows = [
    ['events', formatCount(d.events)],
    ['streams', d.streams],
    ['span', esc(formatDur(s.total))],
    ['start', esc(formatTime(m, m.t0))],
    ['polls', formatCount(m.polls.n)],
    ['tasks spawned', `<span class="spawns">${s.spawns}</span>`],
    ['tasks terminated', `<span class="terminates">${s.terminates}</span>`],
    ['CPU / off-CPU samples', `${countSource(d, 0)} / ${countSource(d, 1)}`],
    ['events lost (d9d)', `<b class="dropped">${s.dropped}</b>${s.dropEvents.length ? ` in ${s.dropEvents.length} report(s)` : ''}`],
  ];
  if (d.truncated) rows.push(['note', `last frame truncated at byte ${d.truncatedAt} (segment still being written?)`]);
  const workers = `<h3>Workers</h3><table><tr><th>lane</th><th class="num">polls</th><th class="num">busy</th><th class="num">polling</th><th class="num">parked</th><th class="num" title="thread CPU time / wall time between unpark and park">CPU when active</th></tr>` +
    s.perWorker.map((w) => `<tr><td>${esc(workerName(w.worker))}</td><td class="num">${w.polls}</td><td class="num">${esc(formatDur(w.busy))}</td><td class="num">${(100 * w.utilisation).toFixed(1)}%</td><td class="num">${(100 * w.parked).toFixed(1)}%</td><td class="num">${w.cpuWhileActive === w.cpuWhileActive ? (100 * w.cpuWhileActive).toFixed(0) + '%' : '–'}</td></tr>`).join('') + '</table>';
  const types = `<h3>Poll duration by future type</h3><table><tr><th>future type</th><th class="num">n</th><th class="num">p50</th><th class="num">p90</th><th class="num">p99</th><th class="num">max</th></tr>` +
    s.types.slice(0, 30).map((t) => `<tr><td title="${esc(t.label)}">${esc(shortLabel(t.label))}</td><td class="num">${t.count}</td>${[t.p50, t.p90, t.p99, t.max].map((v) => `<td class="num">${esc(formatDur(v))}</td>`).join('')}</tr>`).join('') + '</table>';
  const drops = s.dropEvents.length ? `<h3>Loss reports</h3><pre class="stack">${s.dropEvents.slice(0, 50).map((e) => esc(JSON.stringify(e, (k, v) => (typeof v === 'bigint' ? v.toString() : v)))).join('\n')}</pre>` : '';
  const other = [...d.counts].filter(([n]) => !KNOWN_SHOWN.has(n)).sort((a, b) => b[1] - a[1]).slice(0, 20);
  const custom = other.length ? `<h3>Other events</h3><table>${other.map(([n, c]) => `<tr><td>${esc(shortLabel(n))}</td><td class="num">${c}</td></tr>`).join('')}</table>` : '';
  el.innerHTML = `<h3>Summary</h3>${kv(rows)}${workers}${types}${drops}${custom}`;
}

const KNOWN_SHOWN = new Set(['PollStartEvent', 'PollEndEvent', 'WorkerParkEvent', 'WorkerUnparkEvent', 'WakeEventEvent', 'CpuSampleEvent', 'TaskSpawnEvent', 'TaskTerminateEvent']);

function countSource(d, src) {
  let n = 0;
  for (let i = 0; i < d.sample.length; i++) if (d.sample.source[i] === src) n++;
  return n;
}
