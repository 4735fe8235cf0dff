// Task counts over time, drawn under the worker lanes on the timeline's time
// axis: tasks alive (spawned or first seen, not yet terminated), tasks
// queued (woken or spawned, not yet polled: the runtime's run queues as
// seen from outside, since Tokio's own queue depths cannot be read from
// another process) and tasks being polled.
//
// Tasks alive before the attach are counted only from what the recording
// shows of them (first poll, or from the start when only their terminate is
// seen); ones neither polled nor terminated while recording are not
// counted, and the chart says so. A trace without spawn, terminate and poll
// events (d9d's default probe set records none) says that instead of
// drawing zeros.
//
// Each series is a step function built once per trace: +1/-1 deltas sorted
// by time, then a running sum. A pixel column shows the highest value inside
// it, so a burst narrower than a pixel is not lost when zoomed out.

import { lowerBound } from './model.js';

// BOTTOM: a line under the plot for what the chart cannot count.
const HEIGHT = 100, TOP = 14, BOTTOM = 16;
export const SERIES = [
  { key: 'alive', label: 'tasks alive', colour: '#8a9bd6' },
  { key: 'queued', label: 'queued (woken/spawned, not polled yet)', colour: '#e0a040' },
  { key: 'running', label: 'being polled', colour: '#3fae6a' },
];

// Sorts deltas by time and sums them: { ts, v } with v[i] the value from
// ts[i] until ts[i + 1]; `start` is the value before the first delta.
function stepSeries(ts, delta, start = 0) {
  const idx = Uint32Array.from(ts.keys()).sort((a, b) => ts[a] - ts[b] || delta[a] - delta[b]);
  const outTs = new Float64Array(idx.length), v = new Float64Array(idx.length);
  let cur = start, max = start;
  for (let k = 0; k < idx.length; k++) {
    cur += delta[idx[k]];
    outTs[k] = ts[idx[k]];
    v[k] = cur;
    if (cur > max) max = cur;
  }
  return { ts: outTs, v, start, max };
}

// Alive: a task counts from its spawn, else from its first poll, else (only
// its terminate seen: alive when the recording began) from the start; until
// its terminate, else to the end.
function aliveSeries(m) {
  const d = m.d, P = m.polls, J = d.jobEnd;
  const first = new Map(), end = new Map(), ts = [], delta = [];
  const seen = (t, at) => { if (t && (!first.has(t) || at < first.get(t))) first.set(t, at); };
  for (let i = 0; i < d.spawn.length; i++) if (!first.has(d.spawn.task[i])) first.set(d.spawn.task[i], d.spawn.ts[i]);
  for (let p = 0; p < P.n; p++) seen(P.task[p], P.start[p]);
  // A blocking-pool job: seen from its start, ended at its end unless a
  // terminate says when.
  for (let i = 0; i < J.length; i++) { seen(J.task[i], J.ts[i] - J.dur[i]); end.set(J.task[i], J.ts[i]); }
  for (let i = 0; i < d.terminate.length; i++) end.set(d.terminate.task[i], d.terminate.ts[i]);
  // Ended, never seen before: alive when the recording began.
  let before = 0;
  for (const [t, at] of end) { if (!first.has(t)) before++; ts.push(at); delta.push(-1); }
  for (const at of first.values()) { ts.push(at); delta.push(1); }
  return stepSeries(ts, delta, before);
}

// Queued: from the wake that scheduled a poll (or from the spawn, for a
// task's first poll with no wake before it) until that poll starts.
function queuedSeries(m) {
  const d = m.d, P = m.polls, W = m.wakes;
  const spawnAt = new Map();
  for (let i = 0; i < d.spawn.length; i++) spawnAt.set(d.spawn.task[i], d.spawn.ts[i]);
  const ts = [], delta = [];
  const B = W.pollsByTask;
  for (let t = 0; t + 1 < B.offsets.length; t++) {
    for (let j = B.offsets[t]; j < B.offsets[t + 1]; j++) {
      const p = B.rows[j];
      let from = NaN;
      if (W.wakeOf[p] >= 0) from = P.start[p] - W.delay[p];
      else if (j === B.offsets[t] && spawnAt.has(P.task[p])) from = spawnAt.get(P.task[p]);
      if (!(from <= P.start[p])) continue;
      ts.push(from, P.start[p]); delta.push(1, -1);
    }
  }
  return stepSeries(ts, delta);
}

function runningSeries(m) {
  const P = m.polls, ts = new Float64Array(2 * P.n), delta = new Float64Array(2 * P.n);
  for (let p = 0; p < P.n; p++) { ts[2 * p] = P.start[p]; delta[2 * p] = 1; ts[2 * p + 1] = P.end[p]; delta[2 * p + 1] = -1; }
  return stepSeries(ts, delta);
}

export function buildTaskSeries(m) {
  if (!m.taskSeries) m.taskSeries = { alive: aliveSeries(m), queued: queuedSeries(m), running: runningSeries(m) };
  return m.taskSeries;
}

// What the chart cannot show, said on it.
export function taskNote(m) {
  const d = m.d;
  if (!d.spawn.length && !d.terminate.length && !m.polls.n) return 'no spawn, terminate or poll events in this trace: no task counts (d9d\'s default probes record none; attach with --probes all)';
  const parts = ['tasks alive before the recording count from their first poll (or from the start if only their end is seen); ones not polled while recording are not counted'];
  if (!d.spawn.length) parts.push('no spawn events: alive from first poll');
  if (!d.wake.length) parts.push('no wake events: queued only spawn to first poll');
  return parts.join('; ');
}

// The value of series s at time t.
export function valueAt(s, t) {
  const i = lowerBound(s.ts, t + 1e-9) - 1; // last delta at or before t
  return i < 0 ? s.start : s.v[i];
}

// Highest value of s in [a, b).
function maxIn(s, a, b) {
  let best = valueAt(s, a);
  const lo = lowerBound(s.ts, a), hi = lowerBound(s.ts, b);
  // bounded scan; past it, sample evenly (the column still shows a peak)
  const step = Math.max(1, Math.floor((hi - lo) / 512));
  for (let i = lo; i < hi; i += step) if (s.v[i] > best) best = s.v[i];
  return best;
}

export class TaskChart {
  // tl: the Timeline whose view (v0, v1) and x mapping this chart follows.
  constructor(canvas, model, tl) {
    this.c = canvas;
    this.m = model;
    this.tl = tl;
    this.series = buildTaskSeries(model);
    this.note = taskNote(model);
    this.pending = false;
    this.resize();
    new ResizeObserver(() => this.resize()).observe(canvas.parentElement);
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    this.w = this.c.parentElement.clientWidth;
    this.c.style.height = `${HEIGHT}px`;
    this.c.width = Math.max(1, Math.floor(this.w * dpr));
    this.c.height = Math.floor(HEIGHT * dpr);
    this.dpr = dpr;
    this.draw();
  }

  requestDraw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  draw() {
    const g = this.c.getContext('2d'), tl = this.tl;
    const gutter = tl.x(tl.v0);
    g.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    g.fillStyle = '#15171c';
    g.fillRect(0, 0, this.w, HEIGHT);
    g.fillStyle = '#1a1d23';
    g.fillRect(gutter, TOP - 2, this.w - gutter, HEIGHT - TOP - BOTTOM + 4);
    // one scale for all three: the highest value in view
    const cols = Math.max(0, Math.floor(this.w - gutter));
    const vals = {};
    let top = 1;
    for (const { key } of SERIES) {
      const s = this.series[key], a = new Float64Array(cols);
      for (let x = 0; x < cols; x++) a[x] = maxIn(s, tl.t(gutter + x), tl.t(gutter + x + 1));
      vals[key] = a;
      for (let x = 0; x < cols; x++) if (a[x] > top) top = a[x];
    }
    const h = HEIGHT - TOP - BOTTOM, y = (v) => TOP + h - (v / top) * h;
    const shown = {};
    for (const { key, colour } of SERIES) {
      const a = vals[key];
      g.strokeStyle = colour;
      g.beginPath();
      for (let x = 0; x < cols; x++) { const yy = y(a[x]); if (x) g.lineTo(gutter + x, yy); else g.moveTo(gutter, yy); }
      g.stroke();
      shown[key] = cols ? Math.max(...a) : 0;
    }
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    g.fillStyle = '#d8dce4';
    g.fillText('tasks', 6, TOP + 6);
    g.fillStyle = '#8a92a3';
    g.fillText(`max ${top}`, 6, TOP + 22);
    let lx = gutter + 4;
    for (const { key, label, colour } of SERIES) {
      g.fillStyle = colour;
      g.fillText(`${label} ${shown[key]}`, lx, 6);
      lx += g.measureText(`${label} ${shown[key]}`).width + 16;
    }
    g.fillStyle = '#8a92a3';
    g.fillText(this.note, gutter + 4, HEIGHT - BOTTOM / 2);
    // for tests: the highest value of each series drawn in this view
    this.c.dataset.shown = JSON.stringify(shown);
    this.c.dataset.note = this.note;
    this.c.dataset.drawn = String((+this.c.dataset.drawn || 0) + 1);
  }
}
