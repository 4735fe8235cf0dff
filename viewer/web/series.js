// Process series drawn under the worker lanes: what d9d sampled outside the
// runtime, next to its events. From ProcessResourceUsageEvent (dial9's
// getrusage fields) and D9ProcessResourcesEvent (RSS now, threads, fds, I/O):
// CPU in cores, RSS, threads, open fds, context switches/s, I/O bytes/s;
// from SocketAcceptQueueEvent one row per listener: connections waiting to
// be accepted, against its backlog. Counters become rates over each sample
// interval; gauges hold their value until the next sample.

import { lowerBound, formatCount } from './model.js';

export const SERIES_ROW = 34;
const LABEL_W = 84;

const mib = (v) => `${(v / 1048576).toFixed(1)} MiB`;
const perSec = (unit) => (v) => `${v >= 100 ? formatCount(Math.round(v)) : v.toFixed(1)} ${unit}/s`;
const plain = (v) => formatCount(Math.round(v));

// One sample per ts (the two resource events share their timestamp).
function resourceSamples(custom) {
  const rest = new Map();
  for (const c of custom) if (c.name === 'D9ProcessResourcesEvent') rest.set(c.ts, c);
  return custom.filter((c) => c.name === 'ProcessResourceUsageEvent')
    .map((c) => ({ ...rest.get(c.ts), ...c }))
    .sort((a, b) => a.ts - b.ts);
}

// A row whose value at sample i holds over [a[i], b[i]).
function row(name, fmt, a, b, val, limit = null) {
  let max = limit || 0;
  for (const v of val) if (v > max) max = v;
  return { name, fmt, a, b, val, max, limit, drawn: 0 };
}

function gaugeRow(name, fmt, samples, get, limit = null) {
  const n = samples.length;
  const a = new Float64Array(n), b = new Float64Array(n), val = new Float64Array(n);
  // The last sample holds for one median interval.
  const step = n > 1 ? (samples[n - 1].ts - samples[0].ts) / (n - 1) : 1e8;
  for (let i = 0; i < n; i++) {
    a[i] = samples[i].ts;
    b[i] = i + 1 < n ? samples[i + 1].ts : samples[i].ts + step;
    val[i] = get(samples[i]);
  }
  return row(name, fmt, a, b, val, limit);
}

// Counters: the increase over each interval, per second (times `scale`).
function rateRow(name, fmt, samples, get, scale = 1) {
  const n = Math.max(0, samples.length - 1);
  const a = new Float64Array(n), b = new Float64Array(n), val = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const s0 = samples[i], s1 = samples[i + 1], dt = (s1.ts - s0.ts) / 1e9;
    a[i] = s0.ts;
    b[i] = s1.ts;
    val[i] = dt > 0 ? Math.max(0, get(s1) - get(s0)) / dt * scale : 0;
  }
  return row(name, fmt, a, b, val);
}

function queueRows(custom) {
  const byListener = new Map();
  for (const c of custom) {
    if (c.name !== 'SocketAcceptQueueEvent') continue;
    const key = `${c.socket_cookie}/${c.socket_inode}`;
    let l = byListener.get(key);
    if (!l) byListener.set(key, (l = { addr: c.ip_version === 6 ? `[${c.local_addr}]` : c.local_addr, port: c.local_port, s: [] }));
    l.s.push(c);
  }
  return [...byListener.values()].sort((x, y) => x.port - y.port).map((l) => {
    l.s.sort((x, y) => x.ts - y.ts);
    const backlog = Number(l.s[l.s.length - 1].backlog_limit);
    const r = gaugeRow(`accept ${l.addr}:${l.port}`, (v) => `${plain(v)} waiting (backlog ${backlog})`, l.s,
      (c) => Number(c.pending_connections), backlog);
    r.kind = 'accept';
    r.label = `queue :${l.port}`;
    return r;
  });
}

export function buildSeries(custom) {
  const s = resourceSamples(custom), N = (k) => (c) => Number(c[k] || 0);
  const rows = [];
  if (s.length) {
    rows.push(rateRow('CPU', (v) => `${v.toFixed(2)} cores`, s, (c) => N('user_cpu_ns')(c) + N('system_cpu_ns')(c), 1e-9));
    const rss = s.some((c) => c.rss_bytes !== undefined) ? N('rss_bytes') : N('max_rss_bytes');
    rows.push(gaugeRow('RSS', mib, s, rss));
    if (s.some((c) => c.threads !== undefined)) {
      rows.push(gaugeRow('threads', plain, s, N('threads')));
      rows.push(gaugeRow('open fds', plain, s, N('open_fds')));
    }
    rows.push(rateRow('ctx switches', perSec('sw'), s,
      (c) => N('voluntary_context_switches')(c) + N('involuntary_context_switches')(c)));
    if (s.some((c) => c.rchar !== undefined)) rows.push(rateRow('I/O', perSec('B'), s, (c) => N('rchar')(c) + N('wchar')(c)));
  }
  return rows.concat(queueRows(custom));
}

export function seriesHeight(rows) {
  return rows.length * SERIES_ROW;
}

// Draws the rows from y down on the timeline tl (its x(), v0/v1, w).
export function drawSeries(g, tl, rows, y) {
  rows.forEach((r, k) => drawRow(g, tl, r, y + k * SERIES_ROW));
}

function drawRow(g, tl, r, y) {
  const top = y + 4, h = SERIES_ROW - 8;
  g.fillStyle = '#171a20';
  g.fillRect(LABEL_W, y + 2, tl.w - LABEL_W, SERIES_ROW - 4);
  g.fillStyle = '#aab2c0';
  g.font = '11px system-ui, sans-serif';
  g.textBaseline = 'middle';
  const label = r.label || r.name;
  g.fillText(label.length > 13 ? `${label.slice(0, 12)}…` : label, 6, y + SERIES_ROW / 2);
  g.save();
  g.beginPath(); g.rect(LABEL_W, y, tl.w - LABEL_W, SERIES_ROW); g.clip();
  const scale = r.max > 0 ? h / r.max : 0;
  const full = r.kind === 'accept' ? '#ff5a5a' : '#5aa9ff';
  let i = lowerBound(r.b, tl.v0);
  r.drawn = 0;
  for (; i < r.val.length && r.a[i] <= tl.v1; i++) {
    const x0 = Math.max(LABEL_W, tl.x(r.a[i])), x1 = Math.min(tl.w, tl.x(r.b[i]));
    const bh = Math.max(r.val[i] > 0 ? 1 : 0, r.val[i] * scale);
    // An accept queue at its backlog drops connections: the alarm colour.
    g.fillStyle = r.limit && r.val[i] >= r.limit ? full : r.kind === 'accept' ? '#f0a040' : '#5aa9ff';
    g.fillRect(x0, top + h - bh, Math.max(1, x1 - x0), bh);
    r.drawn++;
  }
  if (r.limit) {
    g.strokeStyle = '#ff5a5a88';
    g.beginPath(); g.moveTo(LABEL_W, top + h - r.limit * scale + 0.5); g.lineTo(tl.w, top + h - r.limit * scale + 0.5); g.stroke();
  }
  // The scale, readable over the bars.
  const text = `max ${r.fmt(r.max)}`, tw = g.measureText(text).width;
  g.fillStyle = '#15171cd0';
  g.fillRect(tl.w - tw - 8, y + 3, tw + 6, 13);
  g.fillStyle = '#aab2c0';
  g.textAlign = 'right';
  g.fillText(text, tl.w - 4, y + 9);
  g.textAlign = 'left';
  g.restore();
}

// Tooltip text for time t in row k, or null.
export function seriesTip(rows, k, t) {
  const r = rows[k];
  if (!r) return null;
  const i = lowerBound(r.b, t);
  if (i >= r.val.length || r.a[i] > t) return `${r.name}: no sample here`;
  return `${r.name}: ${r.fmt(r.val[i])}`;
}

// What was drawn, for tests.
export function seriesFacts(rows) {
  return rows.map((r) => ({ name: r.name, n: r.val.length, max: r.max, limit: r.limit, drawn: r.drawn }));
}
