// Turns decoded columns into what the viewer shows: polls per worker lane,
// parked spans, samples attached to polls, wakes matched to the polls they
// scheduled, symbol lookup and the summary numbers.

import { buildSeries } from './series.js';

export const BLOCKING_WORKER = 254;
export const OTHER_WORKER = 255;

function sortedOrder(ts, idx) {
  // Per-thread batches are mostly in time order already; skip the sort then.
  let sorted = true;
  for (let i = 1; i < idx.length; i++) if (ts[idx[i]] < ts[idx[i - 1]]) { sorted = false; break; }
  if (!sorted) idx.sort((a, b) => ts[a] - ts[b]);
  return idx;
}

// Groups row indices of a table by worker, each group sorted by time. Worker
// ids are small (255 = other), so counting uses a plain array.
function byWorker(t) {
  let max = 0;
  for (let i = 0; i < t.length; i++) {
    const w = t.worker[i];
    if (w < 0 || w >= 1 << 20) return byWorkerSparse(t);
    if (w > max) max = w;
  }
  const counts = new Int32Array(max + 1);
  for (let i = 0; i < t.length; i++) counts[t.worker[i]]++;
  const groups = [];
  for (let w = 0; w <= max; w++) groups[w] = counts[w] ? { idx: new Uint32Array(counts[w]), n: 0 } : null;
  for (let i = 0; i < t.length; i++) { const g = groups[t.worker[i]]; g.idx[g.n++] = i; }
  const out = new Map();
  for (let w = 0; w <= max; w++) if (groups[w]) out.set(w, sortedOrder(t.ts, groups[w].idx));
  return out;
}

function byWorkerSparse(t) {
  const lists = new Map();
  for (let i = 0; i < t.length; i++) { let l = lists.get(t.worker[i]); if (!l) lists.set(t.worker[i], (l = [])); l.push(i); }
  const out = new Map();
  for (const [w, l] of [...lists].sort((a, b) => a[0] - b[0])) out.set(w, sortedOrder(t.ts, Uint32Array.from(l)));
  return out;
}

// First index in sorted array a[lo..hi) with a[i] >= x.
export function lowerBound(a, x, lo = 0, hi = a.length) {
  while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] < x) lo = m + 1; else hi = m; }
  return lo;
}

function gather(src, idx, Type = Float64Array) {
  const out = new Type(idx.length);
  for (let i = 0; i < idx.length; i++) out[i] = src[idx[i]];
  return out;
}

// Pairs each PollStart with the next PollEnd on the same worker; a start
// without an end before the next start (segment boundary) is dropped.
function buildPolls(d) {
  const starts = byWorker(d.pollStart), ends = byWorker(d.pollEnd);
  const S = d.pollStart, E = d.pollEnd;
  const workers = [...new Set([...starts.keys(), ...ends.keys()])].sort((a, b) => a - b);
  let n = 0;
  const lanes = new Map();
  const cap = S.length;
  const start = new Float64Array(cap), end = new Float64Array(cap), worker = new Int32Array(cap);
  const task = new Float64Array(cap), loc = new Int32Array(cap), queue = new Int32Array(cap);
  for (const w of workers) {
    const si = starts.get(w) || new Uint32Array(0), ei = ends.get(w) || new Uint32Array(0);
    const first = n;
    let e = 0;
    for (let k = 0; k < si.length; k++) {
      const t0 = S.ts[si[k]];
      const next = k + 1 < si.length ? S.ts[si[k + 1]] : Infinity;
      while (e < ei.length && E.ts[ei[e]] < t0) e++;
      if (e >= ei.length || E.ts[ei[e]] > next) continue;
      const i = si[k];
      start[n] = t0; end[n] = E.ts[ei[e]]; worker[n] = w; task[n] = S.task[i]; loc[n] = S.loc[i]; queue[n] = S.queue[i];
      n++; e++;
    }
    lanes.set(w, { first, last: n });
  }
  return {
    n, lanes,
    start: start.subarray(0, n), end: end.subarray(0, n), worker: worker.subarray(0, n),
    task: task.subarray(0, n), loc: loc.subarray(0, n), queue: queue.subarray(0, n),
  };
}

// Parked spans (park .. next unpark) and CPU use while active per worker.
function buildParks(d) {
  const P = d.park;
  const lanes = new Map();
  for (const [w, idx] of byWorker(P)) {
    const s = [], e = [];
    let parkedAt = -1, unpark = -1, activeWall = 0, activeCpu = 0;
    for (const i of idx) {
      if (P.park[i]) {
        parkedAt = P.ts[i];
        // active interval unpark..park: thread CPU time over wall time
        if (unpark >= 0 && P.cpu[i] === P.cpu[i] && P.cpu[unpark] === P.cpu[unpark]) {
          activeWall += P.ts[i] - P.ts[unpark];
          activeCpu += Math.max(0, P.cpu[i] - P.cpu[unpark]);
        }
        unpark = -1;
      } else {
        if (parkedAt >= 0) { s.push(parkedAt); e.push(P.ts[i]); parkedAt = -1; }
        unpark = i;
      }
    }
    lanes.set(w, { start: Float64Array.from(s), end: Float64Array.from(e), cpuRatio: activeWall > 0 ? Math.min(1, activeCpu / activeWall) : NaN });
  }
  return lanes;
}

// Which poll (index) was running on worker w at time t, or -1.
export function pollAt(polls, w, t) {
  const lane = polls.lanes.get(w);
  if (!lane) return -1;
  const i = lowerBound(polls.end, t, lane.first, lane.last);
  return i < lane.last && polls.start[i] <= t ? i : -1;
}

// Samples per worker lane (sorted) and each sample's enclosing poll.
function attachSamples(d, polls) {
  const S = d.sample;
  const lanes = new Map();
  const samplePoll = new Int32Array(S.length).fill(-1);
  const pollSamples = new Map(); // poll index -> [sample indices]
  for (const [w, idx] of byWorker(S)) {
    lanes.set(w, { idx, ts: gather(S.ts, idx) });
    for (const i of idx) {
      const p = pollAt(polls, w, S.ts[i]);
      samplePoll[i] = p;
      if (p >= 0) { let l = pollSamples.get(p); if (!l) pollSamples.set(p, (l = [])); l.push(i); }
    }
  }
  return { lanes, samplePoll, pollSamples };
}

// Merges lists of row indices, each sorted by ts, into one time-ordered list.
function mergeByTime(lists, ts) {
  lists = lists.filter((l) => l.length);
  if (lists.length === 1) return lists[0];
  const total = lists.reduce((a, l) => a + l.length, 0);
  const out = new Uint32Array(total);
  const pos = new Array(lists.length).fill(0);
  // k is the number of workers (small): a linear scan per element is fine
  for (let o = 0; o < total; o++) {
    let best = -1, bt = Infinity;
    for (let k = 0; k < lists.length; k++) {
      if (pos[k] < lists[k].length) { const t = ts[lists[k][pos[k]]]; if (t < bt) { bt = t; best = k; } }
    }
    out[o] = lists[best][pos[best]++];
  }
  return out;
}

// Dense task numbers (0..ntasks-1) for a column of task ids, -1 for ids not
// in `known` (when given). Task ids are Tokio's sequential counters, so a
// direct table over [min, max] usually works; a Map is the fallback.
function denseTasks(polls, wakes) {
  let lo = Infinity, hi = -Infinity, integral = true;
  for (let i = 0; i < polls.n; i++) { const v = polls.task[i]; if (v < lo) lo = v; if (v > hi) hi = v; if (v !== Math.floor(v)) integral = false; }
  const pollDense = new Int32Array(polls.n), wakeDense = new Int32Array(wakes.length);
  let count = 0;
  if (integral && polls.n && hi - lo < 1 << 24) {
    const table = new Int32Array(hi - lo + 1).fill(-1);
    for (let i = 0; i < polls.n; i++) {
      const k = polls.task[i] - lo;
      if (table[k] < 0) table[k] = count++;
      pollDense[i] = table[k];
    }
    for (let i = 0; i < wakes.length; i++) {
      const k = wakes.woken[i] - lo;
      wakeDense[i] = k >= 0 && k <= hi - lo && k === Math.floor(k) ? table[k] : -1;
    }
  } else {
    const map = new Map();
    for (let i = 0; i < polls.n; i++) {
      let k = map.get(polls.task[i]);
      if (k === undefined) map.set(polls.task[i], (k = count++));
      pollDense[i] = k;
    }
    for (let i = 0; i < wakes.length; i++) wakeDense[i] = map.get(wakes.woken[i]) ?? -1;
  }
  return { count, pollDense, wakeDense };
}

// Buckets time-ordered rows by dense task number, keeping time order.
function bucketByTask(order, denseOf, ntasks) {
  const counts = new Int32Array(ntasks + 1);
  for (let i = 0; i < order.length; i++) { const k = denseOf[order[i]]; if (k >= 0) counts[k + 1]++; }
  for (let k = 0; k < ntasks; k++) counts[k + 1] += counts[k];
  const offsets = counts.slice();
  const rows = new Uint32Array(counts[ntasks]);
  for (let i = 0; i < order.length; i++) { const k = denseOf[order[i]]; if (k >= 0) rows[counts[k]++] = order[i]; }
  return { offsets, rows };
}

// For every poll, the wake that made its task runnable and the delay until
// the poll started. A wake that arrived while the task was being polled is
// counted from that poll's end.
function matchWakes(d, polls) {
  const W = d.wake;
  const wakeOf = new Int32Array(polls.n).fill(-1);
  const delay = new Float64Array(polls.n).fill(NaN);
  const dense = denseTasks(polls, W);
  const pollOrder = mergeByTime([...polls.lanes.values()].map((l) => {
    const a = new Uint32Array(l.last - l.first);
    for (let i = 0; i < a.length; i++) a[i] = l.first + i;
    return a;
  }), polls.start);
  const wakeOrder = mergeByTime([...byWorker(W).values()], W.ts);
  const P = bucketByTask(pollOrder, dense.pollDense, dense.count);
  const K = bucketByTask(wakeOrder, dense.wakeDense, dense.count);
  for (let t = 0; t < dense.count; t++) {
    let k = K.offsets[t];
    const kEnd = K.offsets[t + 1];
    for (let j = P.offsets[t]; j < P.offsets[t + 1] && k < kEnd; j++) {
      const p = P.rows[j];
      const first = j === P.offsets[t];
      const prevStart = first ? -Infinity : polls.start[P.rows[j - 1]];
      while (k < kEnd && W.ts[K.rows[k]] <= prevStart) k++;
      if (k < kEnd && W.ts[K.rows[k]] <= polls.start[p]) {
        const w = K.rows[k];
        const prevEnd = first ? -Infinity : polls.end[P.rows[j - 1]];
        wakeOf[p] = w;
        delay[p] = Math.max(0, polls.start[p] - Math.max(W.ts[w], prevEnd));
        while (k < kEnd && W.ts[K.rows[k]] <= polls.start[p]) k++;
      }
    }
  }
  // by dense task index: polls and wakes in time order (the task lane)
  return { wakeOf, delay, pollsByTask: P, wakesByTask: K, taskOfPoll: dense.pollDense };
}

function buildSymbols(d) {
  const map = new Map();
  for (const s of d.symbols) {
    let l = map.get(s.addr);
    if (!l) map.set(s.addr, (l = []));
    l[s.depth] = s.name;
  }
  return map;
}

// Future type of every poll as an index into d.strings (-1: unknown): the
// poll's spawn location, else a custom label event for its task (label,
// future_type or type_name field), else the task's TaskSpawnEvent location.
function pollLabels(d, polls) {
  const byText = new Map(d.strings.map((s, i) => [s, i]));
  const intern = (text) => { let i = byText.get(text); if (i === undefined) { i = d.strings.length; d.strings.push(text); byText.set(text, i); } return i; };
  const fallback = new Map();
  for (let i = 0; i < d.spawn.length; i++) if (d.strings[d.spawn.loc[i]]) fallback.set(d.spawn.task[i], d.spawn.loc[i]);
  for (const c of d.custom) {
    const label = c.future_type ?? c.label ?? c.type_name;
    if (c.task_id !== undefined && typeof label === 'string' && label) fallback.set(Number(c.task_id), intern(label));
  }
  const out = new Int32Array(polls.n);
  for (let p = 0; p < polls.n; p++) {
    const l = polls.loc[p];
    out[p] = d.strings[l] ? l : fallback.get(polls.task[p]) ?? -1;
  }
  return out;
}

export function buildModel(d) {
  const polls = buildPolls(d);
  const parks = buildParks(d);
  const samples = attachSamples(d, polls);
  const wakes = matchWakes(d, polls);
  const symbols = buildSymbols(d);
  const labels = pollLabels(d, polls);
  let t0 = Infinity, t1 = -Infinity;
  const span = (a) => { if (a.length) { for (let i = 0; i < a.length; i++) { const v = a[i]; if (v < t0) t0 = v; if (v > t1) t1 = v; } } };
  span(d.pollStart.ts); span(d.pollEnd.ts); span(d.park.ts); span(d.wake.ts); span(d.sample.ts);
  if (t0 === Infinity) { t0 = 0; t1 = 1; }
  if (t1 <= t0) t1 = t0 + 1;

  const wakeLanes = byWorker(d.wake);
  const workerSet = new Set([...polls.lanes.keys(), ...parks.keys(), ...samples.lanes.keys(), ...wakeLanes.keys()]);
  const workers = [...workerSet].sort((a, b) => a - b);

  // Wall clock from the earliest ClockSyncEvent: wall = ts + (realtime - ts_sync).
  let wallOffsetMs = null;
  if (d.clockSyncs.length) {
    const c = d.clockSyncs.reduce((a, b) => (b.ts < a.ts ? b : a));
    wallOffsetMs = Number(c.realtime - BigInt(Math.round(c.ts))) / 1e6;
  }
  const wakeTs = new Map();
  for (const [w, idx] of wakeLanes) wakeTs.set(w, gather(d.wake.ts, idx));

  const m = { d, polls, parks, samples, wakes, symbols, labels, t0, t1, workers, wallOffsetMs, wakeTs };
  m.drops = lostEvents(d);
  m.series = buildSeries(d.custom);
  return m;
}

export function labelText(m, l) {
  return l >= 0 ? m.d.strings[l] : '(no spawn location)';
}

export function pollLabel(m, p) {
  const l = m.labels[p];
  return l >= 0 ? m.d.strings[l] : `task ${m.polls.task[p]}`;
}

// Frames of a stack, root first, with inlined frames expanded.
export function symbolizeStack(m, stackIdx) {
  const addrs = m.d.stacks[stackIdx] || [];
  const out = [];
  for (let i = addrs.length - 1; i >= 0; i--) {
    const names = m.symbols.get(addrs[i]);
    if (names && names.length) { for (const n of names) if (n) out.push(n); } else out.push('0x' + addrs[i]);
  }
  return out;
}

export function workerName(w) {
  if (w === BLOCKING_WORKER) return 'blocking';
  if (w === OTHER_WORKER) return 'other';
  return `worker ${w}`;
}

// 1234567 -> "1,234,567" (Intl's first use costs ~100 ms of ICU start-up)
export function formatCount(n) {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

export function formatDur(ns) {
  if (!isFinite(ns)) return '–';
  if (ns < 1e3) return `${ns.toFixed(0)} ns`;
  if (ns < 1e6) return `${(ns / 1e3).toFixed(1)} µs`;
  if (ns < 1e9) return `${(ns / 1e6).toFixed(2)} ms`;
  return `${(ns / 1e9).toFixed(3)} s`;
}

export function formatTime(m, ts) {
  if (m.wallOffsetMs === null) return `+${formatDur(ts - m.t0)}`;
  const ms = m.wallOffsetMs + ts / 1e6;
  const d = new Date(Math.floor(ms));
  const frac = (ms - Math.floor(ms)) * 1000;
  return d.toISOString().replace('T', ' ').replace('Z', '') + String(Math.floor(frac)).padStart(3, '0') + ' UTC';
}

// Indices of the k largest values of a (skipping NaN), largest first: one
// pass with a size-k min-heap, so most elements cost one comparison.
export function topK(a, k, filter) {
  const heap = [];
  const less = (x, y) => a[x] < a[y];
  const down = (i) => {
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let m = i;
      if (l < heap.length && less(heap[l], heap[m])) m = l;
      if (r < heap.length && less(heap[r], heap[m])) m = r;
      if (m === i) return;
      [heap[i], heap[m]] = [heap[m], heap[i]];
      i = m;
    }
  };
  for (let i = 0; i < a.length; i++) {
    const v = a[i];
    if (v !== v || (heap.length === k && v <= a[heap[0]]) || (filter && !filter(i))) continue;
    if (heap.length < k) {
      heap.push(i);
      for (let j = heap.length - 1; j > 0;) {
        const p = (j - 1) >> 1;
        if (!less(heap[j], heap[p])) break;
        [heap[j], heap[p]] = [heap[p], heap[j]];
        j = p;
      }
    } else {
      heap[0] = i;
      down(0);
    }
  }
  return heap.sort((x, y) => a[y] - a[x]);
}

export function pollDurations(m) {
  if (!m.durations) {
    const p = m.polls;
    m.durations = new Float64Array(p.n);
    for (let i = 0; i < p.n; i++) m.durations[i] = p.end[i] - p.start[i];
  }
  return m.durations;
}

// Drops reported by the recorder: any custom event named D9Lost*.
function lostEvents(d) {
  const out = [];
  for (const c of d.custom) {
    if (!c.name.startsWith('D9Lost')) continue;
    out.push(c);
  }
  return out;
}

function percentile(sorted, q) {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

export function summary(m) {
  const p = m.polls, dur = pollDurations(m);
  const total = m.t1 - m.t0;
  const perWorker = m.workers.map((w) => {
    const lane = p.lanes.get(w);
    let busy = 0, n = 0;
    if (lane) for (let i = lane.first; i < lane.last; i++) { busy += dur[i]; n++; }
    const pk = m.parks.get(w);
    let parked = 0;
    if (pk) for (let i = 0; i < pk.start.length; i++) parked += pk.end[i] - pk.start[i];
    return { worker: w, polls: n, busy, utilisation: busy / total, parked: parked / total, cpuWhileActive: pk ? pk.cpuRatio : NaN };
  });
  // group durations by label with typed arrays: count, offsets, fill, sort
  const nl = m.d.strings.length + 1; // slot 0 is "unknown" (-1)
  const counts = new Int32Array(nl + 1), totals = new Float64Array(nl), tasks = new Int32Array(nl);
  for (let i = 0; i < p.n; i++) { counts[m.labels[i] + 2]++; totals[m.labels[i] + 1] += dur[i]; }
  for (let k = 0; k < nl; k++) counts[k + 1] += counts[k];
  const fill = counts.slice(), byLabel = new Float64Array(p.n);
  for (let i = 0; i < p.n; i++) byLabel[fill[m.labels[i] + 1]++] = dur[i];
  const P = m.wakes.pollsByTask;
  for (let t = 0; t + 1 < P.offsets.length; t++) if (P.offsets[t] < P.offsets[t + 1]) tasks[m.labels[P.rows[P.offsets[t]]] + 1]++;
  const types = [];
  for (let k = 0; k < nl; k++) {
    if (counts[k] === counts[k + 1]) continue;
    const sorted = byLabel.subarray(counts[k], counts[k + 1]).sort();
    types.push({ label: labelText(m, k - 1), count: sorted.length, total: totals[k], tasks: tasks[k], p50: percentile(sorted, 0.5), p90: percentile(sorted, 0.9), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1] });
  }
  types.sort((a, b) => b.total - a.total);
  const dropped = m.drops.reduce((a, c) => a + Number(c.lost ?? c.count ?? c.dropped ?? 0), 0);
  return { total, perWorker, types, spawns: m.d.spawn.length, terminates: m.d.terminate.length, dropped, dropEvents: m.drops };
}
