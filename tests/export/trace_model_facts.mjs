// Opens a trace event JSON file with Chrome DevTools' trace model (the
// Performance panel's parser, npm @paulirish/trace_engine) and prints what
// it understood as one JSON line: per thread, its name, how many entries it
// built and the longest one. Usage: node trace_model_facts.mjs FILE
import fs from 'node:fs';
import path from 'node:path';
import url from 'node:url';

const here = path.dirname(url.fileURLToPath(import.meta.url));
const engine = path.join(here, 'node_modules', '@paulirish', 'trace_engine', 'models', 'trace', 'trace.js');
if (!fs.existsSync(engine)) {
  console.error(`trace_engine not installed in ${here}/node_modules: run scripts/bootstrap`);
  process.exit(2);
}
// The model measures text boxes; Node has none (the package's README says so).
globalThis.DOMRect = class { constructor(x = 0, y = 0, w = 0, h = 0) { Object.assign(this, { x, y, width: w, height: h }); } };
// URL.parse is Node 22's (Debian 12 has 18); the model uses it for page URLs.
URL.parse ??= (u, base) => { try { return new URL(u, base); } catch { return null; } };
const Trace = await import(engine);

const events = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')).traceEvents;
const model = Trace.TraceModel.Model.createWithAllHandlers();
await model.parse(events);
const data = model.parsedTrace(0).data ?? model.parsedTrace(0);
const threads = [];
for (const [pid, proc] of data.Renderer.processes) {
  for (const [tid, t] of proc.threads) {
    let longest = null;
    let polls = 0;
    for (const e of t.entries ?? []) {
      if (e.cat === 'poll') polls++;
      if (e.cat === 'poll' && (!longest || e.dur > longest.dur)) longest = e;
    }
    threads.push({ pid, tid, name: t.name ?? '', entries: (t.entries ?? []).length, polls,
      longest: longest && { name: longest.name, dur_us: longest.dur, task: longest.args?.task } });
  }
}
console.log(JSON.stringify({ events: events.length, threads }));
