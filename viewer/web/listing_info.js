// The recording list's start and duration columns: d9ctl serve's
// /api/info decodes one segment for them (nothing in a path or a stat says
// when a segment starts or how long it spans), so rows are filled in the
// background, a few requests at a time, after the list is shown.

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
        row.start.parentElement.dataset.events = String(info.events);
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
