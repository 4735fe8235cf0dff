// Sorting the recording list: a click on a column header sorts the rows by
// that column (again: the other way). Keys are the rows' data-* values,
// numbers where the column is a number (start and duration arrive later,
// from /api/info: rows without one yet sort last either way). Filtering
// hides rows and sorting moves them: the two do not disturb each other.

const KEYS = {
  service: { attr: 'service' },
  pid: { attr: 'pid', num: true },
  instance: { attr: 'instance' },
  segment: { attr: 'index', num: true },
  start: { attr: 'startNs', num: true },
  duration: { attr: 'durationNs', num: true },
  size: { attr: 'size', num: true },
  modified: { attr: 'mtime', num: true },
};

let sortBy = null; // { col, dir }

function keyOf(tr, k) {
  const v = tr.dataset[k.attr];
  if (v === undefined || v === '') return null;
  return k.num ? Number(v) : v;
}

export function sortSegments(table) {
  if (!sortBy) return;
  const k = KEYS[sortBy.col];
  const tb = table.tBodies[0];
  const rows = [...tb.rows].filter((r) => r.dataset.path !== undefined);
  rows.sort((a, b) => {
    const x = keyOf(a, k), y = keyOf(b, k);
    if (x === null || y === null) return (x === null) - (y === null);
    const c = k.num ? x - y : String(x).localeCompare(String(y));
    return (sortBy.dir * c) || a.dataset.order - b.dataset.order;
  });
  tb.append(...rows);
  for (const th of table.tHead.rows[0].cells) {
    if (th.dataset.sort === sortBy.col) th.setAttribute('aria-sort', sortBy.dir > 0 ? 'ascending' : 'descending');
    else th.removeAttribute('aria-sort');
  }
}

export function installSegmentSort(table) {
  table.tHead.addEventListener('click', (e) => {
    const th = e.target.closest('th[data-sort]');
    if (!th) return;
    const col = th.dataset.sort;
    sortBy = { col, dir: sortBy?.col === col ? -sortBy.dir : 1 };
    sortSegments(table);
  });
}

// Start and duration sorts change as /api/info answers come in.
export function sortedByInfo() {
  return sortBy?.col === 'start' || sortBy?.col === 'duration';
}
