// Hand-built trace exercising what real producers may add on top of dial9's
// vocabulary: d9d's D9LostEventsEvent drop reports, an off-CPU sample with a
// duration field, unknown custom events with container fields, an annotation
// frame, several streams, the blocking-pool lane. The viewer must show the
// drops and the off-CPU period and keep working around the rest.
'use strict';
const fs = require('fs');
const path = require('path');
const t = require('./lib');

// Minimal encoder for the test's own input (trace-format.md sections 2-5).
class Enc {
  constructor() { this.parts = []; this.ids = new Map(); }
  raw(...bufs) { for (const b of bufs) this.parts.push(Buffer.isBuffer(b) ? b : Buffer.from(b)); }
  u16(v) { const b = Buffer.alloc(2); b.writeUInt16LE(v); return b; }
  u32(v) { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; }
  u64(v) { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; }
  uleb(v) { v = BigInt(v); const o = []; while (v >= 0x80n) { o.push(Number(v & 0x7fn) | 0x80); v >>= 7n; } o.push(Number(v)); return Buffer.from(o); }
  name16(s) { const b = Buffer.from(s); return Buffer.concat([this.u16(b.length), b]); }
  blob(s) { const b = Buffer.from(s); return Buffer.concat([this.u32(b.length), b]); }
  stream() { this.raw('TRC\0\x01'); this.ids.clear(); this.strs = new Map(); this.base = 0n; }
  str(s) {
    if (!this.strs.has(s)) { const id = this.strs.size; this.strs.set(s, id); this.raw([3], this.u32(1), this.u32(id), this.blob(s)); }
    return this.u32(this.strs.get(s));
  }
  event(name, fields, ts, values) {
    if (!this.ids.has(name)) {
      const id = this.ids.size; this.ids.set(name, id);
      this.raw([1], this.u16(id), this.name16(name), [1], this.u16(fields.length));
      for (const [f, code] of fields) this.raw(this.name16(f), [code]);
    }
    ts = BigInt(ts);
    if (ts < this.base || ts - this.base > 0xffffffn) { this.raw([5], this.u64(ts)); this.base = ts; }
    const d = Number(ts - this.base); this.base = ts;
    this.raw([2], this.u16(this.ids.get(name)), [d & 0xff, (d >> 8) & 0xff, d >> 16], ...values);
  }
  bytes() { return Buffer.concat(this.parts); }
}

const POLL_START = [['worker_id', 9], ['local_queue', 11], ['task_id', 9], ['spawn_loc', 7]];
const T0 = 5_000_000_000n;

function build() {
  const e = new Enc();
  e.stream();
  e.event('ClockSyncEvent', [['realtime_ns', 9]], T0, [e.uleb(1767225600000000000n)]);
  e.stream();
  const poll = (w, task, loc, a, b) => {
    e.event('PollStartEvent', POLL_START, a, [e.uleb(w), [0], e.uleb(task), e.str(loc)]);
    e.event('PollEndEvent', [['worker_id', 9]], b, [e.uleb(w)]);
  };
  for (let i = 0; i < 50; i++) poll(0, 10 + i, 'src/fast.rs:1:1', T0 + BigInt(i) * 100_000n, T0 + BigInt(i) * 100_000n + 20_000n);
  poll(254, 99, 'src/blocking.rs:7:3', T0 + 1_000_000n, T0 + 4_000_000n);
  // the long poll: 8 ms, holding a 3 ms off-CPU period with a stack
  const long = T0 + 6_000_000n;
  e.raw([4], e.u32(1), e.u32(0), e.u32(2), e.u64(0x5555000010n), e.u64(0x5555000020n));
  e.event('CpuSampleEvent', [['worker_id', 9], ['tid', 13], ['source', 11], ['thread_name', 0x87], ['callchain', 6], ['cpu', 0x89], ['duration_ns', 0x89]],
    long + 2_000_000n, [e.uleb(1), e.u32(77), [1], [0], e.u32(0), [0], [1], e.uleb(3_000_000)]);
  poll(1, 500, 'src/slow.rs:9:9', long, long + 8_000_000n);
  // an annotation frame (tag 0x06) for the PollEndEvent schema
  e.raw([6], e.uleb(e.ids.get('PollEndEvent')), e.u16(1), e.u16(0), e.name16('unit'), e.blob('ns'));
  e.event('D9LostEventsEvent', [['lost', 9], ['source', 7]], long + 9_000_000n, [e.uleb(42), e.str('ringbuf')]);
  e.event('MyCustomThing', [['tags', 10], ['list', 14], ['x', 2]], long + 9_500_000n,
    [e.u32(1), e.blob('k'), e.blob('v'), e.u32(2), [9], e.uleb(5), [4], e.blob('five'), Buffer.alloc(8)]);
  e.stream(); // a second stream: state resets, ids restart
  e.event('D9LostEventsEvent', [['lost', 9], ['source', 7]], long + 9_800_000n, [e.uleb(8), e.str('perf')]);
  e.raw([4], e.u32(1), e.u32(0), e.u32(1), e.u64(0x5555000010n));
  e.event('CpuSampleEvent', [['worker_id', 9], ['tid', 13], ['source', 11], ['thread_name', 0x87], ['callchain', 6], ['cpu', 0x89]],
    long + 1_000_000n, [e.uleb(1), e.u32(77), [0], [0], e.u32(0), [0]]);
  e.event('SymbolTableEntry', [['addr', 9], ['size', 9], ['symbol_name', 7], ['inline_depth', 9], ['source_file', 7], ['source_line', 9]],
    0, [e.uleb(0x5555000010n), e.uleb(0), e.str('app::slow_path'), e.uleb(0), e.str(''), e.uleb(0)]);
  return e.bytes();
}

async function main() {
  const root = t.tmpdir('edges');
  fs.mkdirSync(path.join(root, 'edge', '1-1'), { recursive: true });
  fs.writeFileSync(path.join(root, 'edge', '1-1', 'trace.0.bin'), build());
  t.plan(7);
  const srv = await t.startServe(root);
  const { ctx, close } = await t.launchBrowser();
  try {
    const page = await ctx.newPage();
    const r = await t.openViewer(page, `${srv.url}#seg=edge/1-1/trace.0.bin`);
    t.ok(r.state === 'ready' && r.errors.length === 0, 'a trace with custom events, containers and an annotation frame opens', r.errors.join('; ') + await page.textContent('#error'));
    const workers = await page.evaluate(() => window.d9.model.workers);
    t.ok(workers.includes(254) && workers.includes(0) && workers.includes(1), `lanes include the blocking pool (${workers})`);
    t.ok(await page.evaluate(() => window.d9.model.polls.n) === 52, 'all 52 polls are paired');
    await page.click('#tabs [data-tab=summary]');
    const summary = await page.textContent('#tab-summary');
    t.ok(/events lost \(d9d\)\s*50 in 2 report/.test(summary), 'summary reports the 42 + 8 events d9d lost', summary.slice(0, 400));
    t.ok(/MyCustomThing\s*1/.test(summary), 'unknown custom events are counted, not fatal');
    await page.click('#tabs [data-tab=blocking]');
    const blocking = await page.textContent('#tab-blocking');
    t.ok(/task 500/.test(blocking) && /1 off-CPU 3\.00 ms/.test(blocking), 'blocking navigator lists the poll with its 3 ms off-CPU period', blocking);
    await page.click('#tab-blocking li');
    const details = await page.textContent('#tab-details');
    t.ok(/off-CPU sample at \+2\.00 ms for 3\.00 ms/.test(details) && /app::slow_path/.test(details),
      'poll details show the off-CPU duration and the symbolized stack', details);
    await t.shot(page, 'format-edges');
  } finally {
    await close();
    srv.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
