// Flamegraph (icicle, root at the top) of stack samples filtered by time
// range, worker, task and sample source. Click a frame to zoom into it,
// click the root row to zoom out.

import { lowerBound, symbolizeStack } from './model.js';

const ROW = 17;

// filter: { t0, t1, worker ('all' | number), task (NaN = any), source ('0' | '1' | 'all') }
export function buildFlameTree(m, filter) {
  const S = m.d.sample;
  const root = { name: 'all', value: 0, children: new Map(), empty: 0 };
  const stackPaths = new Map(); // stack index -> frames (cached)
  const add = (i) => {
    if (filter.source !== 'all' && S.source[i] !== +filter.source) return;
    if (S.stack[i] < 0 || !m.d.stacks[S.stack[i]].length) { root.empty++; return; } // nothing to draw
    if (filter.task === filter.task) {
      const p = m.samples.samplePoll[i];
      if (p < 0 || m.polls.task[p] !== filter.task) return;
    }
    let frames = stackPaths.get(S.stack[i]);
    if (!frames) stackPaths.set(S.stack[i], (frames = symbolizeStack(m, S.stack[i])));
    let node = root;
    node.value++;
    for (const f of frames) {
      let c = node.children.get(f);
      if (!c) node.children.set(f, (c = { name: f, value: 0, children: new Map() }));
      c.value++;
      node = c;
    }
  };
  for (const [w, lane] of m.samples.lanes) {
    if (filter.worker !== 'all' && w !== +filter.worker) continue;
    const hi = lowerBound(lane.ts, filter.t1 + 1e-9);
    for (let k = lowerBound(lane.ts, filter.t0); k < hi; k++) add(lane.idx[k]);
  }
  return root;
}

function hue(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
  return h;
}

export class Flamegraph {
  constructor(canvas) {
    this.c = canvas;
    this.root = null;
    this.focus = null;
    this.boxes = [];
    canvas.addEventListener('click', (e) => this.click(e));
    canvas.addEventListener('mousemove', (e) => {
      const b = this.boxAt(e);
      canvas.title = b ? `${b.node.name}\n${b.node.value} samples (${(100 * b.node.value / this.root.value).toFixed(1)}%)` : '';
    });
    new ResizeObserver(() => this.draw()).observe(canvas);
  }

  setTree(root) {
    this.root = root;
    this.focus = root;
    this.draw();
  }

  draw() {
    const c = this.c, dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    c.width = Math.max(1, Math.floor(w * dpr));
    c.height = Math.max(1, Math.floor(h * dpr));
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = '#15171c';
    g.fillRect(0, 0, w, h);
    this.boxes = [];
    if (!this.root || !this.root.value) {
      g.fillStyle = '#8a92a3';
      g.font = '13px system-ui, sans-serif';
      g.fillText('No stack samples in this selection.', 12, 22);
      c.dataset.frames = '0';
      return;
    }
    g.font = '11px system-ui, sans-serif';
    g.textBaseline = 'middle';
    const scale = w / this.focus.value;
    const drawNode = (node, x, depth) => {
      const width = node.value * scale;
      const y = depth * ROW;
      if (width < 0.5 || y > h) return;
      const k = hue(node.name);
      g.fillStyle = node === this.root ? '#555c6b' : `hsl(${10 + (k % 40)}, ${60 + (k % 25)}%, ${45 + ((k >> 8) % 15)}%)`;
      g.fillRect(x, y, Math.max(0.5, width - 0.5), ROW - 1);
      if (width > 30) {
        g.fillStyle = '#101010';
        g.save(); g.beginPath(); g.rect(x, y, width - 2, ROW); g.clip();
        g.fillText(node.name, x + 3, y + ROW / 2);
        g.restore();
      }
      this.boxes.push({ x, y, w: width, node });
      let cx = x;
      for (const ch of [...node.children.values()].sort((a, b) => a.name.localeCompare(b.name))) {
        drawNode(ch, cx, depth + 1);
        cx += ch.value * scale;
      }
    };
    // ancestors of the focus are drawn full width as a breadcrumb
    const path = this.pathTo(this.focus);
    path.slice(0, -1).forEach((n, d) => {
      g.fillStyle = '#3a404c';
      g.fillRect(0, d * ROW, w, ROW - 1);
      g.fillStyle = '#d8dce4';
      g.fillText(n.name, 3, d * ROW + ROW / 2);
      this.boxes.push({ x: 0, y: d * ROW, w, node: n });
    });
    drawNode(this.focus, 0, path.length - 1);
    c.dataset.frames = String(this.boxes.length);
  }

  pathTo(target) {
    const walk = (n, acc) => {
      acc.push(n);
      if (n === target) return true;
      for (const ch of n.children.values()) if (walk(ch, acc)) return true;
      acc.pop();
      return false;
    };
    const acc = [];
    walk(this.root, acc);
    return acc;
  }

  boxAt(e) {
    const r = this.c.getBoundingClientRect();
    const x = e.clientX - r.left, y = e.clientY - r.top;
    return this.boxes.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW);
  }

  click(e) {
    const b = this.boxAt(e);
    if (!b) return;
    this.focus = b.node === this.focus ? this.root : b.node;
    this.draw();
  }
}
