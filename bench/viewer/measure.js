// Opens each trace given on the command line in headless chromium through a
// real `d9ctl serve` and prints time-to-first-render (navigation start to
// the viewer's 'ready' state, i.e. fetch + decode + model + first paint),
// its phases, and the cost of redrawing the timeline while zooming/panning.
// usage: node measure.js DIR FILE... (FILE relative to DIR)
'use strict';
const fs = require('fs');
const path = require('path');
const lib = require(path.join(__dirname, '../../tests/viewer/lib.js'));

// CPU seconds used so far by every chromium process of this profile: on a
// shared, overloaded machine this is closer to what the open would take on
// an idle one than the wall clock is.
function browserCpuSeconds(userData) {
  const tick = 100; // USER_HZ
  let total = 0;
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (!fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(userData)) continue;
      const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      total += (+f[11] + +f[12]) / tick;
    } catch { /* process gone */ }
  }
  return total;
}

async function measure(ctx, url, file, userData) {
  const page = await ctx.newPage();
  let crashed = false;
  page.on('crash', () => { crashed = true; });
  const cpu0 = browserCpuSeconds(userData);
  const t0 = Date.now();
  await page.goto(`${url}#seg=${encodeURIComponent(file)}`);
  await page.waitForFunction(() => window.d9 && ['ready', 'error'].includes(window.d9.state), null, { timeout: 600000, polling: 200 })
    .catch((e) => { if (!crashed) throw e; });
  const wall = Date.now() - t0;
  const cpu = browserCpuSeconds(userData) - cpu0;
  if (crashed) return { file, crashed: true, wall };
  const r = await page.evaluate(() => {
    const tl = window.d9.timeline, m = window.d9.model;
    const res = { state: window.d9.state, events: window.d9.events, ready: performance.now(), timings: window.d9.timings,
      heapMB: performance.memory ? performance.memory.usedJSHeapSize / 1e6 : NaN };
    if (!tl) return res;
    // 40 redraws across zoom levels from the whole trace to ~1 ms, then pans
    const frames = [];
    const span = m.t1 - m.t0;
    for (let i = 0; i < 40; i++) {
      const w = span / Math.pow(1.5, i % 20), c = m.t0 + span * ((i * 37) % 100) / 100;
      tl.v0 = c - w / 2; tl.v1 = c + w / 2;
      const t = performance.now(); tl.draw(); frames.push(performance.now() - t);
    }
    frames.sort((a, b) => a - b);
    res.frameMedian = frames[20]; res.frameMax = frames[39];
    return res;
  });
  await page.close();
  return { file, wall, cpu, ...r };
}

async function main() {
  const [dir, ...files] = process.argv.slice(2);
  const srv = await lib.startServe(dir);
  const { ctx, close, userData } = await lib.launchBrowser();
  try {
    console.log('trace                        events  ready(s) cpu(s)  fetch decode  model render(ms)  redraw med/max(ms)  heap(MB)');
    for (const f of files) {
      const r = await measure(ctx, srv.url, f, userData);
      if (r.crashed) { console.log(`${f}: TAB CRASHED after ${r.wall} ms`); continue; }
      const T = r.timings;
      console.log(`${path.basename(f).padEnd(26)} ${String(r.events).padStart(8)} ${(r.ready / 1000).toFixed(2).padStart(9)} ${r.cpu.toFixed(2).padStart(6)} ${[T.fetch, T.decode, T.model, T.render].map((x) => String(Math.round(x)).padStart(6)).join(' ')}    ${r.frameMedian?.toFixed(1)}/${r.frameMax?.toFixed(1)}`.padEnd(94) + `${r.heapMB.toFixed(0).padStart(5)}  [${r.state}]`);
    }
  } finally {
    await close();
    srv.stop();
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
