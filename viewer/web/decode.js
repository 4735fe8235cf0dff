// Decoder for the dial9 trace format (docs: shared/docs/trace-format.md).
//
// Produces columnar data (typed arrays per known event kind) rather than one
// object per event, so multi-million-event files fit in a tab. Unknown event
// types are counted and a bounded number kept as plain objects.

const MAGIC0 = 0x54, MAGIC1 = 0x52, MAGIC2 = 0x43, MAGIC3 = 0x00;
const TWO32 = 4294967296;
const MAX_CUSTOM_KEPT = 20000;
// Kept past that cap too: the process series under the lanes (series.js).
const SERIES_EVENTS = new Set(['ProcessResourceUsageEvent', 'SocketAcceptQueueEvent']);

export class TraceError extends Error {}

// A growable column backed by a typed array. One class per element type, so
// every push site stays monomorphic (this is the decoder's hottest call).
function columnClass(Type) {
  return class {
    constructor() { this.a = new Type(1024); this.n = 0; }
    push(v) {
      if (this.n === this.a.length) {
        const b = new Type(this.a.length * 2);
        b.set(this.a);
        this.a = b;
      }
      this.a[this.n++] = v;
    }
    done() { return this.a.subarray(0, this.n); }
  };
}
const COLUMN_CLASSES = new Map([Float64Array, Int32Array, Uint8Array].map((T) => [T, columnClass(T)]));

function table(spec) {
  const t = {};
  for (const [k, T] of Object.entries(spec)) t[k] = new (COLUMN_CLASSES.get(T))();
  return t;
}

function finish(t) {
  const out = {};
  for (const [k, c] of Object.entries(t)) out[k] = c.done();
  out.length = Object.values(out)[0].length;
  return out;
}

// Interns strings and stacks across streams: stream-local pool ids are mapped
// to file-wide indices so columns can store small integers.
class Interner {
  constructor() { this.list = []; this.map = new Map(); }
  id(key, value) {
    let i = this.map.get(key);
    if (i === undefined) { i = this.list.length; this.list.push(value); this.map.set(key, i); }
    return i;
  }
}

function addrHex(lo, hi) {
  return hi ? hi.toString(16) + lo.toString(16).padStart(8, '0') : lo.toString(16);
}

class Reader {
  constructor(bytes) {
    this.b = bytes;
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.p = 0;
    this.utf8 = new TextDecoder('utf-8', { fatal: false });
  }
  need(n) { if (this.p + n > this.b.length) throw RangeError('truncated'); }
  u8() { this.need(1); return this.b[this.p++]; }
  u16() { this.need(2); const v = this.dv.getUint16(this.p, true); this.p += 2; return v; }
  u24() { this.need(3); const b = this.b, p = this.p; this.p += 3; return b[p] | (b[p + 1] << 8) | (b[p + 2] << 16); }
  u32() { this.need(4); const v = this.dv.getUint32(this.p, true); this.p += 4; return v; }
  u64() {
    this.need(8);
    const lo = this.dv.getUint32(this.p, true), hi = this.dv.getUint32(this.p + 4, true);
    this.p += 8;
    return hi < 0x200000 ? hi * TWO32 + lo : (BigInt(hi) << 32n) | BigInt(lo);
  }
  i64() { this.need(8); const v = this.dv.getBigInt64(this.p, true); this.p += 8; return Number(v); }
  f64() { this.need(8); const v = this.dv.getFloat64(this.p, true); this.p += 8; return v; }
  // LEB128: a Number while exact, a BigInt beyond 2^53.
  varint() {
    const b = this.b;
    let p = this.p, v = 0, mul = 1;
    for (let i = 0; i < 10; i++) {
      if (p >= b.length) throw RangeError('truncated');
      const x = b[p++];
      v += (x & 0x7f) * mul;
      if (!(x & 0x80)) {
        this.p = p;
        if (v <= Number.MAX_SAFE_INTEGER) return v;
        return this.bigVarint();
      }
      mul *= 128;
    }
    throw new TraceError(`varint longer than 10 bytes at byte ${this.p}`);
  }
  bigVarint() { // re-read exactly; only for values above 2^53
    let p = this.p - 1;
    while (p > 0 && (this.b[p - 1] & 0x80)) p--;
    let v = 0n, shift = 0n;
    for (let q = p; q < this.p; q++) { v |= BigInt(this.b[q] & 0x7f) << shift; shift += 7n; }
    return v;
  }
  bytes(n) { this.need(n); const s = this.b.subarray(this.p, this.p + n); this.p += n; return s; }
  name16() { return this.utf8.decode(this.bytes(this.u16())); }
  blob32text() { return this.utf8.decode(this.bytes(this.u32())); }
}

// Per-field-type value readers. Pooled values resolve through the stream
// state (st); containers recurse through the same table.
function readValue(r, code, st) {
  switch (code) {
    case 1: return r.i64();
    case 2: return r.f64();
    case 3: return r.u8() !== 0;
    case 4: return r.blob32text();
    case 5: return r.bytes(r.u32()).slice();
    case 6: { const id = r.u32(); const g = st.stacks.get(id); if (g === undefined) throw new TraceError(`stack pool id ${id} used before definition`); return g; }
    case 7: { const id = r.u32(); const g = st.strings.get(id); return g === undefined ? st.unresolved(id) : g; }
    case 8: { const n = r.u32(); const a = []; for (let i = 0; i < n; i++) { const v = r.u64(); a.push(v.toString(16)); } return a; }
    case 9: return r.varint();
    case 10: { const n = r.u32(); const o = {}; for (let i = 0; i < n; i++) { const k = r.blob32text(); o[k] = r.blob32text(); } return o; }
    case 11: return r.u8();
    case 12: return r.u16();
    case 13: return r.u32();
    case 14: { const n = r.u32(); const a = []; for (let i = 0; i < n; i++) a.push(readValue(r, r.u8(), st)); return a; }
    case 15: { const n = r.u32(); const o = new Map(); for (let i = 0; i < n; i++) { const k = readValue(r, r.u8(), st); o.set(k, readValue(r, r.u8(), st)); } return o; }
    default: throw new TraceError(`unknown field type code ${code}`);
  }
}

// Builds the per-event-kind sink: given the schema's field names, returns a
// function that stores one decoded event (values array, timestamp).
function makeSink(name, fields, out) {
  const ix = (f) => fields.indexOf(f);
  const num = (v) => (typeof v === 'bigint' ? Number(v) : v === undefined || v === null ? NaN : +v);
  const get = (vals, i, dflt) => (i < 0 || vals[i] === undefined ? dflt : vals[i]);
  const T = out.tables;
  switch (name) {
    case 'PollStartEvent': {
      const w = ix('worker_id'), t = ix('task_id'), l = ix('spawn_loc'), q = ix('local_queue');
      return (v, ts) => { const s = T.pollStart; s.ts.push(ts); s.worker.push(num(get(v, w, 255))); s.task.push(num(get(v, t, 0))); s.loc.push(get(v, l, 0)); s.queue.push(num(get(v, q, 0))); };
    }
    case 'PollEndEvent': {
      const w = ix('worker_id');
      return (v, ts) => { T.pollEnd.ts.push(ts); T.pollEnd.worker.push(num(get(v, w, 255))); };
    }
    case 'WorkerParkEvent':
    case 'WorkerUnparkEvent': {
      const w = ix('worker_id'), c = ix('cpu_time_ns'), sw = ix('sched_wait_ns');
      const kind = name === 'WorkerParkEvent' ? 1 : 0;
      return (v, ts) => { const s = T.park; s.ts.push(ts); s.worker.push(num(get(v, w, 255))); s.park.push(kind); s.cpu.push(num(get(v, c, NaN))); s.wait.push(num(get(v, sw, 0))); };
    }
    case 'WakeEventEvent': {
      const a = ix('waker_task_id'), b = ix('woken_task_id'), w = ix('target_worker');
      return (v, ts) => { const s = T.wake; s.ts.push(ts); s.waker.push(num(get(v, a, 0))); s.woken.push(num(get(v, b, 0))); s.worker.push(num(get(v, w, 255))); };
    }
    case 'CpuSampleEvent': {
      const w = ix('worker_id'), tid = ix('tid'), src = ix('source'), cc = ix('callchain');
      // Off-CPU duration is not in dial9's schema; producers that know it may
      // add one of these optional fields.
      const dur = ['duration_ns', 'off_cpu_ns', 'offcpu_ns'].map(ix).find((i) => i >= 0) ?? -1;
      return (v, ts) => { const s = T.sample; s.ts.push(ts); s.worker.push(num(get(v, w, 255))); s.tid.push(num(get(v, tid, 0))); s.source.push(num(get(v, src, 0))); s.stack.push(get(v, cc, -1)); s.dur.push(num(get(v, dur, NaN))); };
    }
    case 'TaskSpawnEvent': {
      const t = ix('task_id'), l = ix('spawn_loc');
      return (v, ts) => { T.spawn.ts.push(ts); T.spawn.task.push(num(get(v, t, 0))); T.spawn.loc.push(get(v, l, 0)); };
    }
    case 'TaskTerminateEvent': {
      const t = ix('task_id');
      return (v, ts) => { T.terminate.ts.push(ts); T.terminate.task.push(num(get(v, t, 0))); };
    }
    case 'D9BlockingPollEvent': {
      // d9d's blocking-pool job, written at its end: a blocking task's one
      // poll runs it to completion, so its task ends there too.
      const t = ix('task_id'), d = ix('duration_ns');
      return (v, ts) => { const s = T.jobEnd; s.ts.push(ts); s.task.push(num(get(v, t, 0))); s.dur.push(num(get(v, d, 0))); };
    }
    case 'QueueSampleEvent': {
      const g = ix('global_queue');
      return (v, ts) => { T.queue.ts.push(ts); T.queue.len.push(num(get(v, g, 0))); };
    }
    case 'ClockSyncEvent': {
      const r = ix('realtime_ns');
      return (v, ts) => { if (r >= 0) out.clockSyncs.push({ ts, realtime: BigInt(v[r]) }); };
    }
    case 'SegmentMetadataEvent': {
      const e = ix('entries');
      return (v, ts) => { if (e >= 0) out.metadata.push({ ts, entries: v[e] }); };
    }
    case 'SymbolTableEntry': {
      const a = ix('addr'), s = ix('symbol_name'), d = ix('inline_depth'), f = ix('source_file'), l = ix('source_line');
      return (v) => {
        if (a < 0 || s < 0) return;
        out.symbols.push({ addr: v[a].toString(16), name: out.strings.list[v[s]], depth: num(get(v, d, 0)), file: f >= 0 ? out.strings.list[v[f]] : '', line: num(get(v, l, 0)) });
      };
    }
    default:
      return (v, ts) => {
        if (out.custom.length >= MAX_CUSTOM_KEPT && !name.startsWith('D9') && !SERIES_EVENTS.has(name)) return;
        const o = { name, ts };
        fields.forEach((f, i) => { o[f] = v[i]; });
        out.custom.push(o);
      };
  }
}

function newOutput() {
  const F = Float64Array, I = Int32Array, U8 = Uint8Array;
  return {
    tables: {
      pollStart: table({ ts: F, worker: I, task: F, loc: I, queue: I }),
      pollEnd: table({ ts: F, worker: I }),
      park: table({ ts: F, worker: I, park: U8, cpu: F, wait: F }),
      wake: table({ ts: F, waker: F, woken: F, worker: I }),
      sample: table({ ts: F, worker: I, tid: F, source: U8, stack: I, dur: F }),
      spawn: table({ ts: F, task: F, loc: I }),
      terminate: table({ ts: F, task: F }),
      jobEnd: table({ ts: F, task: F, dur: F }),
      queue: table({ ts: F, len: I }),
    },
    strings: new Interner(),
    stacks: new Interner(),
    clockSyncs: [],
    metadata: [],
    symbols: [],
    custom: [],
    counters: new Map(),
    streams: 0,
    events: 0,
    truncated: false,
  };
}

function isMagic(b, p) {
  return p + 4 <= b.length && b[p] === MAGIC0 && b[p + 1] === MAGIC1 && b[p + 2] === MAGIC2 && b[p + 3] === MAGIC3;
}

// Decodes a whole file (one or more concatenated streams). Throws TraceError
// with the byte offset on corruption; a truncated final frame ends the data.
export function decodeTrace(bytes) {
  if (!isMagic(bytes, 0)) throw new TraceError('not a dial9 trace: missing "TRC\\0" header at byte 0');
  const out = newOutput();
  const r = new Reader(bytes);
  let st = null;
  const newStream = () => {
    out.streams++;
    st = {
      schemas: new Map(), strings: new Map(), stacks: new Map(), base: 0,
      unresolved: (id) => out.strings.id(`\0unresolved${id}`, `<unresolved pool#${id}>`),
    };
  };
  let frameStart = 0;
  try {
    while (r.p < bytes.length) {
      frameStart = r.p;
      if (isMagic(bytes, r.p)) { r.need(5); r.p += 5; newStream(); continue; }
      const tag = r.u8();
      switch (tag) {
        case 0x01: readSchema(r, st, out); break;
        case 0x02: readEvent(r, st, out); break;
        case 0x03: readStringPool(r, st, out); break;
        case 0x04: readStackPool(r, st, out); break;
        case 0x05: { const v = r.u64(); st.base = Number(v); break; }
        case 0x06: readAnnotations(r); break;
        default:
          throw new TraceError(`corrupt trace: unknown frame tag 0x${tag.toString(16).padStart(2, '0')} at byte ${frameStart}`);
      }
    }
  } catch (e) {
    if (!(e instanceof RangeError)) {
      if (e instanceof TraceError && !/at byte/.test(e.message)) e.message += ` (frame at byte ${frameStart})`;
      throw e;
    }
    out.truncated = true; // ran out of bytes mid-frame: a segment still being written
    out.truncatedAt = frameStart;
  }
  const res = {
    pollStart: finish(out.tables.pollStart), pollEnd: finish(out.tables.pollEnd),
    park: finish(out.tables.park), wake: finish(out.tables.wake), sample: finish(out.tables.sample),
    spawn: finish(out.tables.spawn), terminate: finish(out.tables.terminate), jobEnd: finish(out.tables.jobEnd), queue: finish(out.tables.queue),
    strings: out.strings.list, stacks: out.stacks.list, clockSyncs: out.clockSyncs,
    metadata: out.metadata, symbols: out.symbols, custom: out.custom,
    counts: new Map([...out.counters].map(([k, c]) => [k, c.n])),
    streams: out.streams, events: out.events, truncated: out.truncated, truncatedAt: out.truncatedAt,
    bytes: bytes.length,
  };
  return res;
}

function readSchema(r, st, out) {
  const id = r.u16();
  const name = r.name16();
  const hasTs = r.u8() !== 0;
  const n = r.u16();
  const fields = [], codes = [];
  for (let i = 0; i < n; i++) {
    fields.push(r.name16());
    const code = r.u8();
    const base = code & 0x7f;
    if (base < 1 || base > 15) throw new TraceError(`schema "${name}": unknown field type code 0x${code.toString(16)}`);
    codes.push(code);
  }
  // Pooled strings stay interned indices for the column sinks.
    // per-name counter object shared by every stream that declares this name
  let count = out.counters.get(name);
  if (!count) out.counters.set(name, (count = { n: 0 }));
  st.schemas.set(id, { name, hasTs, fields, codes, sink: makeSink(name, fields, out), vals: new Array(n), custom: !KNOWN.has(name), count });
}

function readEvent(r, st, out) {
  const id = r.u16();
  const s = st.schemas.get(id);
  if (!s) throw new TraceError(`event of undeclared type id ${id} at byte ${r.p - 3}`);
  let ts = st.base;
  if (s.hasTs) { ts = st.base + r.u24(); st.base = ts; }
  const vals = s.vals, codes = s.codes;
  for (let i = 0; i < codes.length; i++) {
    let code = codes[i];
    if (code & 0x80) {
      if (r.u8() === 0) { vals[i] = undefined; continue; }
      code &= 0x7f;
    }
    // PooledString -> file-wide string index (resolved to text only for
    // custom events below); PooledStackFrames -> file-wide stack index.
    switch (code) {
      case 9: { // one-byte varints dominate (worker ids, small task ids)
        const x = r.b[r.p];
        if (x < 0x80) { r.p++; vals[i] = x; } else vals[i] = r.varint();
        break;
      }
      case 11: vals[i] = r.u8(); break;
      case 13: vals[i] = r.u32(); break;
      case 7: {
        const pid = r.u32();
        const g = st.strings.get(pid);
        vals[i] = g === undefined ? st.unresolved(pid) : g;
        break;
      }
      default: vals[i] = readValue(r, code, st);
    }
  }
  out.events++;
  s.count.n++;
  if (s.custom) {
    // custom event: resolve pooled strings to text
    const copy = vals.slice();
    for (let i = 0; i < codes.length; i++) if ((codes[i] & 0x7f) === 7 && copy[i] !== undefined) copy[i] = out.strings.list[copy[i]];
    s.sink(copy, ts);
  } else {
    s.sink(vals, ts);
  }
}

const KNOWN = new Set(['PollStartEvent', 'PollEndEvent', 'WorkerParkEvent', 'WorkerUnparkEvent', 'WakeEventEvent',
  'CpuSampleEvent', 'TaskSpawnEvent', 'TaskTerminateEvent', 'QueueSampleEvent', 'ClockSyncEvent',
  'SegmentMetadataEvent', 'SymbolTableEntry']);

function readStringPool(r, st, out) {
  const n = r.u32();
  for (let i = 0; i < n; i++) {
    const id = r.u32();
    const text = r.blob32text();
    st.strings.set(id, out.strings.id(text, text));
  }
}

function readStackPool(r, st, out) {
  const n = r.u32();
  for (let i = 0; i < n; i++) {
    const id = r.u32();
    const count = r.u32();
    r.need(count * 8);
    const frames = new Array(count);
    for (let k = 0; k < count; k++) {
      const lo = r.dv.getUint32(r.p, true), hi = r.dv.getUint32(r.p + 4, true);
      r.p += 8;
      frames[k] = addrHex(lo, hi);
    }
    st.stacks.set(id, out.stacks.id(frames.join(','), frames));
  }
}

function readAnnotations(r) {
  r.varint();
  const n = r.u16();
  for (let i = 0; i < n; i++) { r.u16(); r.name16(); r.bytes(r.u32()); }
}

// Concatenates several decompressed files into one buffer (valid per the
// format: each starts with its own stream header).
export function concatBytes(parts) {
  if (parts.length === 1) return parts[0];
  const total = parts.reduce((a, p) => a + p.length, 0);
  const out = new Uint8Array(total);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}

// Browser-side decompression of a file the user dropped: gzip through
// DecompressionStream; zstd only through `d9ctl serve`.
export async function decompressFile(name, bytes) {
  if (bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b) {
    const ds = new DecompressionStream('gzip');
    const stream = new Blob([bytes]).stream().pipeThrough(ds);
    try {
      return new Uint8Array(await new Response(stream).arrayBuffer());
    } catch (e) {
      throw new TraceError(`${name}: corrupt gzip data (${e.message})`);
    }
  }
  if (bytes.length >= 4 && bytes[0] === 0x28 && bytes[1] === 0xb5 && bytes[2] === 0x2f && bytes[3] === 0xfd)
    throw new TraceError(`${name}: zstd-compressed; open it through "d9ctl serve", which decompresses zstd`);
  return bytes;
}
