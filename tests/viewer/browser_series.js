// A real d9d recording of d9-target backlog (resources every 100 ms, accept
// queues every 400 ms; its listener flooded, then accepting) opened in the
// viewer: the process rows under the worker lanes.
// usage: node browser_series.js DIR PORT BACKLOG SEGMENT...
'use strict';
const t = require('./lib');

async function main() {
  const [dir, port, backlog, ...segs] = process.argv.slice(2);
  if (!segs.length) t.bail('no segments given');
  t.plan(8);
  const srv = await t.startServe(dir);
  const { ctx, close } = await t.launchBrowser();
  try {
    const page = await ctx.newPage();
    const r = await t.openViewer(page, `${srv.url}#${segs.map((s) => `seg=${encodeURIComponent(s)}`).join('&')}`);
    t.ok(r.state === 'ready' && !r.errors.length, 'the recording opens', (await page.textContent('#error')) + r.errors.join('\n'));
    const facts = await page.evaluate(() => ({
      rows: JSON.parse(document.querySelector('#timeline').dataset.series || '[]'),
      lanes: window.d9.timeline.lanes.length,
      seriesY: window.d9.timeline.seriesY(),
      laneBottom: window.d9.timeline.laneY(window.d9.timeline.lanes.length),
    }));
    await t.shot(page, 'series-under-lanes');
    const names = facts.rows.map((x) => x.name);
    const want = ['CPU', 'RSS', 'threads', 'open fds', 'ctx switches', 'I/O'];
    t.ok(want.every((n) => names.includes(n)), `resource rows: ${names.join(', ')}`);
    const acc = facts.rows.find((x) => x.name === `accept 127.0.0.1:${port}`);
    t.ok(acc && acc.limit === +backlog && acc.max >= +backlog,
      `an accept-queue row for the listener, its backlog ${backlog}, at most ${acc && acc.max} waiting`, JSON.stringify(facts.rows));
    t.ok(facts.lanes >= 2 && facts.seriesY >= facts.laneBottom, `the rows come under the ${facts.lanes} worker lanes`);
    t.ok(facts.rows.every((x) => x.n > 0 && x.drawn > 0), 'every row draws its samples', JSON.stringify(facts.rows));

    // The accept row is painted: a full queue in the alarm colour.
    const painted = await page.evaluate((name) => {
      const tl = window.d9.timeline, rows = tl.series, k = rows.findIndex((x) => x.name === name);
      const dpr = window.devicePixelRatio || 1, g = tl.c.getContext('2d');
      const y = Math.floor((tl.seriesY() + k * 34 + 24) * dpr);
      const px = g.getImageData(Math.floor(84 * dpr), y, Math.floor((tl.w - 84) * dpr), 1).data;
      let red = 0;
      for (let i = 0; i < px.length; i += 4) red += px[i] > 200 && px[i + 1] < 120 && px[i + 2] < 120;
      return red;
    }, acc ? acc.name : '');
    t.ok(painted > 10, `the accept-queue row shows the full queue in red (${painted} pixels)`);

    // Hovering the row names its value.
    const pt = await page.evaluate((name) => {
      const tl = window.d9.timeline, rows = tl.series, k = rows.findIndex((x) => x.name === name), r = rows[k];
      let i = 0;
      while (i < r.val.length && r.val[i] < r.limit) i++;
      const b = tl.c.getBoundingClientRect();
      return { x: b.left + (tl.x(r.a[i]) + tl.x(r.b[i])) / 2, y: b.top + tl.seriesY() + k * 34 + 17 };
    }, acc ? acc.name : '');
    await page.mouse.move(pt.x, pt.y);
    const tip = await page.evaluate(() => document.querySelector('.tl-tip').hidden ? '' : document.querySelector('.tl-tip').textContent);
    t.ok(new RegExp(`waiting \\(backlog ${backlog}\\)`).test(tip) && /accept/.test(tip), `hover tooltip: "${tip}"`);
    const cpu = facts.rows.find((x) => x.name === 'CPU');
    t.ok(cpu && cpu.max > 0 && cpu.max < 8, `CPU row in cores (max ${cpu && cpu.max.toFixed(3)})`);
  } finally {
    await close();
    srv.stop();
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
