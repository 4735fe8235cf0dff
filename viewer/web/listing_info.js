// The recording list's start and duration columns: nothing in a path or a
// stat says when a segment starts or how long it spans, so d9ctl serve's
// /api/info reads it for each row: from the segment's first few KiB when
// d9d sealed it (its D9SegmentSpanEvent), else by decoding it whole. Rows
// are filled in the background, a few requests at a time, after the list
// is shown; each row's data-source says which way its answer came.

import { formatDur } from './model.js';

const PARALLEL = 4;

export function formatStart(ns) {
  return new Date(Number(ns) / 1e6).toISOString().slice(0, 23).replace('T', ' ');
}

// rows: [{ path, start: <td>, duration: <td> }]; onFilled runs after each.
export async function fillSegmentInfo(rows, onFilled) {
  let next = 0;
  const worker = async () => {
    while (next < rows.length) {
      const row = rows[next++];
      try {
        const r = await fetch(`/api/info?seg=${encodeURIComponent(row.path)}`);
        if (!r.ok) throw new Error((await r.text()).trim() || `server said ${r.status}`);
        const info = await r.json();
        row.start.textContent = info.start_ns !== undefined ? formatStart(info.start_ns) : '–';
        row.duration.textContent = info.events ? formatDur(info.duration_ns) : 'empty';
        const tr = row.start.parentElement;
        tr.dataset.events = String(info.events);
        tr.dataset.source = info.source;
        if (info.start_ns !== undefined) tr.dataset.startNs = String(info.start_ns);
        if (info.events) tr.dataset.durationNs = String(info.duration_ns);
      } catch (e) {
        row.start.textContent = '?';
        row.duration.textContent = '?';
        row.start.title = row.duration.title = e.message;
      }
      onFilled?.();
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL, rows.length) }, worker));
}
