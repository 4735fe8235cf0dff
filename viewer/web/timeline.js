// Timeline canvas: one lane per worker (then blocking 254 and other 255).
// Drawing is binned per pixel column with binary searches over the sorted
// per-lane arrays, so a frame costs O(pixels x log n) however many events the
// trace holds: zoom and pan stay smooth on millions of events.

import { lowerBound, workerName, formatDur, formatTime, pollLabel } from './model.js';
import { SERIES_ROW, drawSeries, seriesFacts, seriesHeight, seriesTip } from './series.js';

const GUTTER = 84, AXIS = 22, LANE = 40;
const POLL_Y = 6, POLL_H = 18, PARK_Y = 26, PARK_H = 4, MARK_Y = 31, MARK_H = 7;
// Poll colour by duration: < 100 µs, < 1 ms, < 10 ms, longer.
const POLL_COLOURS = ['#3fae6a', '#b9c23a', '#f09a2a', '#ff4040'];
const pollColour = (ns) => (ns < 1e5 ? 0 : ns < 1e6 ? 1 : ns < 1e7 ? 2 : 3);

export class Timeline {
  constructor(canvas, model, hooks) {
    this.c = canvas;
    this.m = model;
    this.hooks = hooks; // { onSelectPoll(p), onRangeChange() }
    this.lanes = model.workers;
    this.series = model.series || []; // process rows under the lanes (series.js)
    this.v0 = model.t0;
    this.v1 = model.t1;
    this.sel = null; // [t0, t1] range selected with shift+drag
    this.selectedPoll = -1;
    this.pending = false;
    this.installInput();
    this.resize();
    new ResizeObserver(() => this.resize()).observe(canvas.parentElement);
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    const w = this.c.parentElement.clientWidth;
    const h = this.seriesY() + seriesHeight(this.series) + 4;
    this.c.style.height = `${h}px`;
    this.c.width = Math.max(1, Math.floor(w * dpr));
    this.c.height = Math.floor(h * dpr);
    this.dpr = dpr;
    this.w = w;
    this.h = h;
    this.draw();
  }

  // time <-> x in CSS pixels
  x(t) { return GUTTER + ((t - this.v0) / (this.v1 - this.v0)) * (this.w - GUTTER); }
  t(x) { return this.v0 + ((x - GUTTER) / (this.w - GUTTER)) * (this.v1 - this.v0); }
  laneY(i) { return AXIS + i * LANE; }
  seriesY() { return this.laneY(this.lanes.length + (this.task ? 1 : 0)); }

  setView(a, b) {
    const minSpan = 1000; // 1 µs
    if (b - a < minSpan) { const c = (a + b) / 2; a = c - minSpan / 2; b = c + minSpan / 2; }
    this.v0 = a;
    this.v1 = b;
    this.requestDraw();
    this.hooks.onRangeChange?.();
  }

  requestDraw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.draw(); });
  }

  draw() {
    const g = this.c.getContext('2d');
    g.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    g.fillStyle = '#15171c';
    g.fillRect(0, 0, this.w, this.h);
    this.drawAxis(g);
    this.sampleColumns = { blocking: 0, oncpu: 0, idle: 0 }; // marks drawn, for tests and the legend
    this.lanes.forEach((w, i) => this.drawLane(g, w, this.laneY(i)));
    if (this.task) this.drawTaskLane(g, this.laneY(this.lanes.length));
    drawSeries(g, this, this.series, this.seriesY());
    this.c.dataset.series = JSON.stringify(seriesFacts(this.series));
    if (this.sel) {
      g.fillStyle = 'rgba(90,169,255,0.18)';
      const a = Math.max(GUTTER, this.x(this.sel[0])), b = Math.min(this.w, this.x(this.sel[1]));
      g.fillRect(a, AXIS, Math.max(1, b - a), this.h - AXIS);
    }
    this.drawSelectedPoll(g);
    this.c.dataset.sampleColumns = JSON.stringify(this.sampleColumns);
    this.c.dataset.drawn = String((+this.c.dataset.drawn || 0) + 1);
  }

  drawAxis(g) {
    g.fillStyle = '#1e2128';
    g.fillRect(0, 0, this.w, AXIS);
    const span = this.v1 - this.v0;
    const step = niceStep(span / Math.max(1, (this.w - GUTTER) / 140));
    g.fillStyle = '#8a92a3';
    g.strokeStyle = '#2a2e36';
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    for (let t = Math.ceil(this.v0 / step) * step; t <= this.v1; t += step) {
      const x = this.x(t);
      g.beginPath(); g.moveTo(x + 0.5, AXIS - 5); g.lineTo(x + 0.5, this.h); g.stroke();
      const label = this.m.wallOffsetMs === null ? `+${formatDur(t - this.m.t0)}` : formatTime(this.m, t).slice(11, 23);
      g.fillText(label, x + 3, AXIS / 2);
    }
    g.fillText(formatDur(span), 4, AXIS / 2);
  }

  drawLane(g, w, y) {
    g.fillStyle = '#1a1d23';
    g.fillRect(GUTTER, y + 2, this.w - GUTTER, LANE - 4);
    g.fillStyle = '#d8dce4';
    g.font = '12px system-ui, sans-serif';
    g.textBaseline = 'middle';
    g.fillText(workerName(w), 6, y + LANE / 2);
    g.save();
    g.beginPath(); g.rect(GUTTER, y, this.w - GUTTER, LANE); g.clip();
    const pk = this.m.parks.get(w);
    if (pk) this.drawSpans(g, pk.start, pk.end, 0, pk.start.length, y + PARK_Y, PARK_H, () => '#4b5260');
    this.drawPolls(g, w, y);
    const s = this.m.samples.lanes.get(w);
    if (s) this.drawSamples(g, s, y);
    const wk = this.m.wakeTs.get(w);
    if (wk) this.drawMarks(g, wk, y + 1, 3, '#e0a040');
    g.restore();
  }

  // Spans [start[i], end[i]) sorted and non-overlapping; spans narrower than
  // a pixel collapse into one pixel per column.
  drawSpans(g, start, end, lo, hi, y, h, colourOf) {
    const paths = new Map();
    const rect = (colour, x, width) => { let p = paths.get(colour); if (!p) paths.set(colour, (p = new Path2D())); p.rect(x, y, width, h); };
    let i = lowerBound(end, this.v0, lo, hi);
    while (i < hi && start[i] <= this.v1) {
      const x0 = this.x(start[i]), x1 = this.x(end[i]);
      if (x1 - x0 >= 1) { rect(colourOf(i), x0, x1 - x0); i++; continue; }
      const px = Math.floor(x0);
      const j = lowerBound(end, this.t(px + 1), i + 1, hi);
      // colour the pixel by the longest span it holds (scan bounded)
      let best = i;
      for (let k = i + 1; k < j && k < i + 64; k++) if (end[k] - start[k] > end[best] - start[best]) best = k;
      rect(colourOf(best), px, 1);
      i = j;
    }
    for (const [colour, p] of paths) { g.fillStyle = colour; g.fill(p); }
  }

  // The selected poll's task on a lane of its own: all its polls, on
  // whichever worker, and the wakes addressed to it.
  setTaskLane(p) {
    const W = this.m.wakes, t = W.taskOfPoll[p];
    const rows = (B) => B.rows.subarray(B.offsets[t], B.offsets[t + 1]);
    const polls = rows(W.pollsByTask), wakes = rows(W.wakesByTask);
    const P = this.m.polls;
    this.task = {
      id: P.task[p], polls,
      start: Float64Array.from(polls, (i) => P.start[i]), end: Float64Array.from(polls, (i) => P.end[i]),
      wakeTs: Float64Array.from(wakes, (i) => this.m.d.wake.ts[i]).sort(),
    };
    this.c.dataset.taskLane = JSON.stringify({ task: this.task.id, polls: polls.length, wakes: wakes.length });
    this.resize();
  }

  drawTaskLane(g, y) {
    const T = this.task, P = this.m.polls;
    g.fillStyle = '#1a1d23';
    g.fillRect(GUTTER, y + 2, this.w - GUTTER, LANE - 4);
    g.fillStyle = '#d8dce4';
    g.font = '12px system-ui, sans-serif';
    g.textBaseline = 'middle';
    g.fillText(`task ${T.id}`, 6, y + LANE / 2);
    g.save();
    g.beginPath(); g.rect(GUTTER, y, this.w - GUTTER, LANE); g.clip();
    this.drawSpans(g, T.start, T.end, 0, T.start.length, y + POLL_Y, POLL_H,
      (i) => POLL_COLOURS[pollColour(P.end[T.polls[i]] - P.start[T.polls[i]])]);
    this.drawMarks(g, T.wakeTs, y + 1, 3, '#e0a040');
    g.restore();
  }

  drawPolls(g, w, y) {
    const P = this.m.polls, lane = P.lanes.get(w);
    if (!lane) return;
    this.drawSpans(g, P.start, P.end, lane.first, lane.last, y + POLL_Y, POLL_H,
      (i) => POLL_COLOURS[pollColour(P.end[i] - P.start[i])]);
  }

  // One mark per pixel column. Off-CPU inside a poll is the alarm (the worker
  // blocked while it should have been polling): red. Off-CPU outside polls is
  // a worker waiting for work: dim, or a parked lane would be solid red.
  // On-CPU samples are blue. A column shows the most telling sample it holds.
  drawSamples(g, lane, y) {
    const S = this.m.d.sample, inPoll = this.m.samples.samplePoll;
    const paths = { blocking: new Path2D(), oncpu: new Path2D(), idle: new Path2D() };
    const spans = { blocking: new Path2D(), idle: new Path2D() };
    const cols = { blocking: 0, oncpu: 0, idle: 0 };
    let i = lowerBound(lane.ts, this.v0);
    while (i < lane.ts.length && lane.ts[i] <= this.v1) {
      const x = Math.floor(this.x(lane.ts[i]));
      const next = lowerBound(lane.ts, this.t(x + 1), i + 1);
      let kind = 'idle';
      for (let k = i; k < next && k < i + 256 && kind !== 'blocking'; k++) {
        const s = lane.idx[k];
        if (S.source[s] !== 1) kind = 'oncpu';
        else if (inPoll[s] >= 0) kind = 'blocking';
        const d = S.dur[s];
        if (S.source[s] === 1 && d === d && d > 0)
          spans[inPoll[s] >= 0 ? 'blocking' : 'idle'].rect(x, y + PARK_Y, Math.max(1, this.x(lane.ts[k] + d) - x), PARK_H);
      }
      paths[kind].rect(x, y + MARK_Y, 1.5, MARK_H);
      cols[kind]++;
      i = next;
    }
    g.fillStyle = '#6a5560'; g.fill(spans.idle); g.fill(paths.idle);
    g.fillStyle = '#6bb6ff'; g.fill(paths.oncpu);
    g.fillStyle = '#ff6b6b'; g.fill(spans.blocking); g.fill(paths.blocking);
    for (const k of Object.keys(cols)) this.sampleColumns[k] += cols[k];
  }

  drawMarks(g, ts, y, h, colour) {
    const p = new Path2D();
    let i = lowerBound(ts, this.v0);
    while (i < ts.length && ts[i] <= this.v1) {
      const x = Math.floor(this.x(ts[i]));
      p.rect(x, y, 1, h);
      i = lowerBound(ts, this.t(x + 1), i + 1);
    }
    g.fillStyle = colour;
    g.fill(p);
  }

  drawSelectedPoll(g) {
    const p = this.selectedPoll;
    if (p < 0) return;
    const li = this.lanes.indexOf(this.m.polls.worker[p]);
    const x0 = this.x(this.m.polls.start[p]), x1 = this.x(this.m.polls.end[p]);
    g.strokeStyle = '#ffffff';
    g.lineWidth = 2;
    g.strokeRect(Math.max(GUTTER - 2, x0 - 1), this.laneY(li) + POLL_Y - 2, Math.max(3, x1 - x0 + 2), POLL_H + 4);
    g.lineWidth = 1;
  }

  // Poll under a point (CSS px), accepting a few pixels of slack.
  hitPoll(x, y) {
    const li = Math.floor((y - AXIS) / LANE);
    if (this.task && li === this.lanes.length && x >= GUTTER) return this.hitTaskPoll(x);
    if (li < 0 || li >= this.lanes.length || x < GUTTER) return -1;
    const P = this.m.polls, lane = P.lanes.get(this.lanes[li]);
    if (!lane) return -1;
    const t = this.t(x), slack = 3 * (this.v1 - this.v0) / (this.w - GUTTER);
    let i = lowerBound(P.end, t - slack, lane.first, lane.last);
    let best = -1;
    for (; i < lane.last && P.start[i] <= t + slack; i++) if (best < 0 || P.end[i] - P.start[i] > P.end[best] - P.start[best]) best = i;
    return best;
  }

  hitTaskPoll(x) {
    const T = this.task, t = this.t(x), slack = 3 * (this.v1 - this.v0) / (this.w - GUTTER);
    let best = -1;
    for (let i = lowerBound(T.end, t - slack); i < T.end.length && T.start[i] <= t + slack; i++)
      if (best < 0 || T.end[i] - T.start[i] > T.end[best] - T.start[best]) best = i;
    return best < 0 ? -1 : T.polls[best];
  }

  // Centre of a poll on screen (client coordinates), for tests and links.
  pollClientPoint(p) {
    const r = this.c.getBoundingClientRect();
    const li = this.lanes.indexOf(this.m.polls.worker[p]);
    const a = Math.max(GUTTER, this.x(this.m.polls.start[p])), b = Math.min(this.w, this.x(this.m.polls.end[p]));
    return { x: r.left + (a + b) / 2, y: r.top + this.laneY(li) + POLL_Y + POLL_H / 2 };
  }

  showPoll(p) {
    const P = this.m.polls, d = P.end[p] - P.start[p];
    const pad = Math.max(d * 2, 1e5);
    this.selectedPoll = p;
    this.setView(P.start[p] - pad, P.end[p] + pad);
  }

  installInput() {
    let drag = null;
    const cx = (e) => e.clientX - this.c.getBoundingClientRect().left;
    const cy = (e) => e.clientY - this.c.getBoundingClientRect().top;
    this.c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const t = this.t(Math.max(GUTTER, cx(e)));
      const f = Math.exp(e.deltaY * 0.0015);
      this.setView(t - (t - this.v0) * f, t + (this.v1 - t) * f);
    }, { passive: false });
    this.c.addEventListener('mousedown', (e) => {
      drag = { x: cx(e), y: cy(e), v0: this.v0, v1: this.v1, shift: e.shiftKey, moved: false };
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = cx(e) - drag.x;
      if (Math.abs(dx) > 3) drag.moved = true;
      if (!drag.moved) return;
      if (drag.shift) {
        const a = this.t(drag.x), b = this.t(cx(e));
        this.sel = [Math.min(a, b), Math.max(a, b)];
        this.requestDraw();
      } else {
        const dt = (dx / (this.w - GUTTER)) * (drag.v1 - drag.v0);
        this.setView(drag.v0 - dt, drag.v1 - dt);
      }
    });
    window.addEventListener('mouseup', (e) => {
      if (!drag) return;
      const d = drag;
      drag = null;
      if (d.moved) { if (d.shift) this.hooks.onRangeChange?.(); return; }
      const p = this.hitPoll(cx(e), cy(e));
      if (p >= 0) { this.selectedPoll = p; this.requestDraw(); this.hooks.onSelectPoll(p); }
      else if (this.sel) { this.sel = null; this.requestDraw(); this.hooks.onRangeChange?.(); }
    });
    this.tip = document.createElement('div');
    this.tip.className = 'tl-tip';
    this.tip.hidden = true;
    this.c.parentElement.append(this.tip);
    this.c.addEventListener('mousemove', (e) => { if (!drag) this.hover(cx(e), cy(e)); });
    this.c.addEventListener('mouseleave', () => { this.tip.hidden = true; });
    this.c.addEventListener('dblclick', () => { this.sel = null; this.setView(this.m.t0, this.m.t1); });
  }

  // Tooltip for the poll under the pointer.
  hover(x, y) {
    const k = Math.floor((y - this.seriesY()) / SERIES_ROW);
    const tip = x >= GUTTER && k >= 0 ? seriesTip(this.series, k, this.t(x)) : null;
    if (tip) {
      this.tip.textContent = tip;
      this.tip.style.left = `${Math.min(x + 12, this.w - 320)}px`;
      this.tip.style.top = `${this.c.offsetTop + y + 14}px`;
      this.tip.hidden = false;
      return;
    }
    const p = this.hitPoll(x, y);
    if (p < 0) { this.tip.hidden = true; return; }
    const P = this.m.polls;
    this.tip.textContent = `${formatDur(P.end[p] - P.start[p])} · task ${P.task[p]} · ${pollLabel(this.m, p)}`;
    this.tip.style.left = `${Math.min(x + 12, this.w - 320)}px`;
    this.tip.style.top = `${this.c.offsetTop + y + 14}px`;
    this.tip.hidden = false;
  }

  // Range the flamegraph uses: the shift-selected range, else the view.
  range() { return this.sel || [this.v0, this.v1]; }
}

function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const k of [1, 2, 5, 10]) if (k * p >= raw) return k * p;
  return 10 * p;
}
