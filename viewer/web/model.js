// Turns decoded columns into what the viewer shows: polls per worker lane,
// parked spans, samples attached to polls, wakes matched to the polls they
// scheduled, symbol lookup and the summary numbers.

export const BLOCKING_WORKER = 254;
export const OTHER_WORKER = 255;

function sortedOrder(ts, idx) {
  // Per-thread batches are mostly in time order already; skip the sort then.
  let sorted = true;
  for (let i = 1; i < idx.length; i++) if (ts[idx[i]] < ts[idx[i - 1]]) { sorted = false; break; }
  if (!sorted) idx.sort((a, b) => ts[a] - ts[b]);
  return idx;
}

// Groups row indices of a table by worker, each group sorted by time.
function byWorker(t) {
  const groups = new Map();
  const counts = new Map();
  for (let i = 0; i < t.length; i++) counts.set(t.worker[i], (counts.get(t.worker[i]) || 0) + 1);
  for (const [w, n] of counts) groups.set(w, { idx: new Uint32Array(n), n: 0 });
  for (let i = 0; i < t.length; i++) { const g = groups.get(t.worker[i]); g.idx[g.n++] = i; }
  const out = new Map();
  for (const [w, g] of groups) out.set(w, sortedOrder(t.ts, g.idx));
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
    let parkedAt = -1;
    for (const i of idx) {
      if (P.park[i]) parkedAt = P.ts[i];
      else if (parkedAt >= 0) { s.push(parkedAt); e.push(P.ts[i]); parkedAt = -1; }
    }
    lanes.set(w, { start: Float64Array.from(s), end: Float64Array.from(e) });
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

// For every poll, the wake that made its task runnable and the delay until
// the poll started. A wake that arrived while the task was being polled is
// counted from that poll's end.
function matchWakes(d, polls) {
  const W = d.wake;
  const wakeOf = new Int32Array(polls.n).fill(-1);
  const delay = new Float64Array(polls.n).fill(NaN);
  const byTask = new Map();
  for (let p = 0; p < polls.n; p++) { let l = byTask.get(polls.task[p]); if (!l) byTask.set(polls.task[p], (l = [])); l.push(p); }
  for (const l of byTask.values()) l.sort((a, b) => polls.start[a] - polls.start[b]);
  const wakesByTask = new Map();
  for (let i = 0; i < W.length; i++) { let l = wakesByTask.get(W.woken[i]); if (!l) wakesByTask.set(W.woken[i], (l = [])); l.push(i); }
  for (const [task, wl] of wakesByTask) {
    const pl = byTask.get(task);
    if (!pl) continue;
    wl.sort((a, b) => W.ts[a] - W.ts[b]);
    let k = 0;
    for (let j = 0; j < pl.length; j++) {
      const p = pl[j];
      const prevStart = j > 0 ? polls.start[pl[j - 1]] : -Infinity;
      while (k < wl.length && W.ts[wl[k]] <= prevStart) k++;
      if (k < wl.length && W.ts[wl[k]] <= polls.start[p]) {
        const w = wl[k];
        const prevEnd = j > 0 ? polls.end[pl[j - 1]] : -Infinity;
        const from = Math.max(W.ts[w], prevEnd);
        wakeOf[p] = w;
        delay[p] = Math.max(0, polls.start[p] - from);
        while (k < wl.length && W.ts[wl[k]] <= polls.start[p]) k++;
      }
    }
  }
  return { wakeOf, delay, byTask };
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

// Labels a poll by its future type: spawn location from the poll, else from
// the task's spawn event, else from a custom label event, else "task <id>".
function taskLabels(d) {
  const m = new Map();
  for (let i = 0; i < d.spawn.length; i++) if (d.strings[d.spawn.loc[i]]) m.set(d.spawn.task[i], d.spawn.loc[i]);
  return m;
}

export function buildModel(d) {
  const polls = buildPolls(d);
  const parks = buildParks(d);
  const samples = attachSamples(d, polls);
  const wakes = matchWakes(d, polls);
  const symbols = buildSymbols(d);
  const spawnLoc = taskLabels(d);
  const customLabels = new Map();
  for (const c of d.custom) {
    const label = c.future_type ?? c.label ?? c.type_name;
    if (c.task_id !== undefined && typeof label === 'string') customLabels.set(Number(c.task_id), label);
  }
  let t0 = Infinity, t1 = -Infinity;
  const span = (a) => { if (a.length) { for (let i = 0; i < a.length; i++) { const v = a[i]; if (v < t0) t0 = v; if (v > t1) t1 = v; } } };
  span(d.pollStart.ts); span(d.pollEnd.ts); span(d.park.ts); span(d.wake.ts); span(d.sample.ts);
  if (t0 === Infinity) { t0 = 0; t1 = 1; }
  if (t1 <= t0) t1 = t0 + 1;

  const workerSet = new Set([...polls.lanes.keys(), ...parks.keys(), ...samples.lanes.keys()]);
  for (let i = 0; i < d.wake.length; i++) workerSet.add(d.wake.worker[i]);
  const workers = [...workerSet].sort((a, b) => a - b);

  // Wall clock from the earliest ClockSyncEvent: wall = ts + (realtime - ts_sync).
  let wallOffsetMs = null;
  if (d.clockSyncs.length) {
    const c = d.clockSyncs.reduce((a, b) => (b.ts < a.ts ? b : a));
    wallOffsetMs = Number(c.realtime - BigInt(Math.round(c.ts))) / 1e6;
  }
  const wakeLanes = byWorker(d.wake);
  const wakeTs = new Map();
  for (const [w, idx] of wakeLanes) wakeTs.set(w, gather(d.wake.ts, idx));

  const m = { d, polls, parks, samples, wakes, symbols, spawnLoc, customLabels, t0, t1, workers, wallOffsetMs, wakeTs };
  m.drops = lostEvents(d);
  return m;
}

export function pollLabel(m, p) {
  const s = m.d.strings[m.polls.loc[p]];
  if (s) return s;
  const task = m.polls.task[p];
  const c = m.customLabels.get(task);
  if (c) return c;
  const l = m.spawnLoc.get(task);
  return l !== undefined ? m.d.strings[l] : `task ${task}`;
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

// Indices of the k largest values of a (skipping NaN), largest first.
export function topK(a, k, filter) {
  const idx = [];
  for (let i = 0; i < a.length; i++) if (a[i] === a[i] && (!filter || filter(i))) idx.push(i);
  if (idx.length > k * 8) {
    const vals = Float64Array.from(idx, (i) => a[i]).sort();
    const cut = vals[vals.length - k];
    return idx.filter((i) => a[i] >= cut).sort((x, y) => a[y] - a[x]).slice(0, k);
  }
  return idx.sort((x, y) => a[y] - a[x]).slice(0, k);
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
    return { worker: w, polls: n, busy, utilisation: busy / total, parked: parked / total };
  });
  const byType = new Map();
  for (let i = 0; i < p.n; i++) {
    const l = pollLabel(m, i);
    let e = byType.get(l);
    if (!e) byType.set(l, (e = { label: l, durs: [], total: 0, tasks: new Set() }));
    e.durs.push(dur[i]); e.total += dur[i]; e.tasks.add(p.task[i]);
  }
  const types = [...byType.values()].map((e) => {
    const s = Float64Array.from(e.durs).sort();
    return { label: e.label, count: s.length, total: e.total, tasks: e.tasks.size, p50: percentile(s, 0.5), p90: percentile(s, 0.9), p99: percentile(s, 0.99), max: s[s.length - 1] };
  }).sort((a, b) => b.total - a.total);
  const dropped = m.drops.reduce((a, c) => a + Number(c.lost ?? c.count ?? c.dropped ?? 0), 0);
  return { total, perWorker, types, spawns: m.d.spawn.length, terminates: m.d.terminate.length, dropped, dropEvents: m.drops };
}
