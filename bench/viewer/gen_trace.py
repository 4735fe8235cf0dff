#!/usr/bin/env python3
"""Writes a synthetic dial9-format trace (shared/docs/trace-format.md) with
about N events, for measuring the viewer. Shaped like a busy Tokio service:
4 workers polling tasks of 20 future types, a wake before every poll, park/
unpark gaps, CPU and off-CPU samples with symbolized stacks, a few 50 ms
blocking polls. One stream per per-worker batch, as dial9's recorder does.

usage: gen_trace.py N OUT.bin
"""
import random
import struct
import sys

WORKERS = 4
BATCH_EVENTS = 40000

U8, VARINT, POOLED_STR, POOLED_STACK, U32, BOOL, OPT_POOLED_STR, OPT_VARINT = 11, 9, 7, 6, 13, 3, 0x87, 0x89
SCHEMAS = [
    ("PollStartEvent", [("worker_id", VARINT), ("local_queue", U8), ("task_id", VARINT), ("spawn_loc", POOLED_STR)]),
    ("PollEndEvent", [("worker_id", VARINT)]),
    ("WorkerParkEvent", [("worker_id", VARINT), ("local_queue", U8), ("cpu_time_ns", VARINT), ("tid", U32)]),
    ("WorkerUnparkEvent", [("worker_id", VARINT), ("local_queue", U8), ("cpu_time_ns", VARINT), ("sched_wait_ns", VARINT), ("tid", U32)]),
    ("WakeEventEvent", [("waker_task_id", VARINT), ("woken_task_id", VARINT), ("target_worker", U8)]),
    ("CpuSampleEvent", [("worker_id", VARINT), ("tid", U32), ("source", U8), ("thread_name", OPT_POOLED_STR), ("callchain", POOLED_STACK), ("cpu", OPT_VARINT)]),
    ("ClockSyncEvent", [("realtime_ns", VARINT)]),
    ("SymbolTableEntry", [("addr", VARINT), ("size", VARINT), ("symbol_name", POOLED_STR), ("inline_depth", VARINT), ("source_file", POOLED_STR), ("source_line", VARINT)]),
]
SID = {name: i for i, (name, _) in enumerate(SCHEMAS)}


def uleb(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def name16(s):
    b = s.encode()
    return struct.pack("<H", len(b)) + b


class Stream:
    """One stream: header, then frames; declares schemas/pools on first use."""

    def __init__(self, out):
        self.out = out
        out += b"TRC\x00\x01"
        self.base = 0
        self.declared = set()
        self.strings = {}
        self.stacks = {}

    def string(self, s):
        if s not in self.strings:
            i = self.strings[s] = len(self.strings)
            b = s.encode()
            self.out += b"\x03" + struct.pack("<III", 1, i, len(b)) + b
        return self.strings[s]

    def stack(self, addrs):
        key = tuple(addrs)
        if key not in self.stacks:
            i = self.stacks[key] = len(self.stacks)
            self.out += b"\x04" + struct.pack("<III", 1, i, len(addrs)) + b"".join(struct.pack("<Q", a) for a in addrs)
        return self.stacks[key]

    def event(self, name, ts, payload):
        sid = SID[name]
        if sid not in self.declared:
            self.declared.add(sid)
            fields = SCHEMAS[sid][1]
            self.out += b"\x01" + struct.pack("<H", sid) + name16(name) + b"\x01" + struct.pack("<H", len(fields))
            for fname, code in fields:
                self.out += name16(fname) + bytes([code])
        if ts < self.base or ts - self.base > 0xFFFFFF:
            self.out += b"\x05" + struct.pack("<Q", ts)
            self.base = ts
        d = ts - self.base
        self.out += b"\x02" + struct.pack("<H", sid) + bytes((d & 0xFF, (d >> 8) & 0xFF, d >> 16)) + payload
        self.base = ts


def main():
    n_target, path = int(sys.argv[1]), sys.argv[2]
    rnd = random.Random(42)
    labels = [f"src/service/handler_{i}.rs:{10 + i}:9" for i in range(20)]
    funcs = [f"service::module_{i}::function_{i}" for i in range(60)]
    stacks = [[0x555500000000 + 0x40 * rnd.randrange(60) for _ in range(rnd.randrange(4, 16))] for _ in range(64)]
    out = bytearray()
    t0 = 1_000_000_000_000
    s = Stream(out)
    s.event("ClockSyncEvent", t0, uleb(1_767_225_600_000_000_000))
    clocks = [t0] * WORKERS
    cpu = [0] * WORKERS
    events = 1
    w = 0
    while events < n_target:
        s = Stream(out)
        clock = clocks[w]
        batch = 0
        while batch < BATCH_EVENTS and events + batch < n_target:
            task = rnd.randrange(1, 5000)
            gap = int(rnd.expovariate(1 / 4000))
            if rnd.random() < 0.05:  # park for a while
                s.event("WorkerParkEvent", clock, uleb(w) + b"\x00" + uleb(cpu[w]) + struct.pack("<I", 1000 + w))
                clock += int(rnd.expovariate(1 / 200000))
                s.event("WorkerUnparkEvent", clock, uleb(w) + b"\x00" + uleb(cpu[w]) + uleb(500) + struct.pack("<I", 1000 + w))
                batch += 2
            s.event("WakeEventEvent", clock, uleb(0) + uleb(task) + bytes([w]))
            clock += gap
            dur = 50_000_000 if rnd.random() < 0.00005 else int(rnd.lognormvariate(9, 1.2))
            loc = s.string(labels[task % len(labels)])
            s.event("PollStartEvent", clock, uleb(w) + b"\x03" + uleb(task) + struct.pack("<I", loc))
            if rnd.random() < 0.1 or dur > 10_000_000:
                source = 1 if dur > 10_000_000 or rnd.random() < 0.3 else 0
                st = s.stack(stacks[rnd.randrange(len(stacks))])
                s.event("CpuSampleEvent", clock + dur // 2, uleb(w) + struct.pack("<I", 1000 + w) + bytes([source]) + b"\x00" + struct.pack("<I", st) + b"\x01" + uleb(w))
                batch += 1
            clock += dur
            cpu[w] += dur
            s.event("PollEndEvent", clock, uleb(w))
            batch += 3
        clocks[w] = clock
        events += batch
        w = (w + 1) % WORKERS
    # symbols, appended as a continuation of the last stream
    for a in sorted({a for st in stacks for a in st}):
        s.event("SymbolTableEntry", 0, uleb(a) + uleb(0) + struct.pack("<I", s.string(funcs[(a >> 6) % 60])) + uleb(0) + struct.pack("<I", s.string("")) + uleb(0))
    with open(path, "wb") as f:
        f.write(out)
    print(f"{path}: ~{events} events, {len(out)} bytes")


if __name__ == "__main__":
    main()
