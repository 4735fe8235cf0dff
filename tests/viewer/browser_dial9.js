// Opens dial9's own reference recording in the viewer (headless chromium
// against a real `d9ctl serve`) and checks what a user would look at.
'use strict';
const fs = require('fs');
const path = require('path');
const t = require('./lib');

const FIXTURE_EVENTS = 210639; // shared/fixtures/dial9/README.md

async function main() {
  const fixture = t.fixturePath();
  const root = t.tmpdir('dial9');
  const dir = path.join(root, 'metrics', '1-1');
  fs.mkdirSync(dir, { recursive: true });
  fs.copyFileSync(fixture, path.join(dir, 'trace.0.bin.gz'));
  fs.copyFileSync(fixture, path.join(dir, 'trace.1.bin.gz'));

  t.plan(16);
  const srv = await t.startServe(root);
  const { ctx, close } = await t.launchBrowser();
  try {
    const page = await ctx.newPage();
    // the listing page offers the segments; ticking one and opening it works
    await page.goto(srv.url);
    await page.waitForSelector('#segments input[type=checkbox]');
    t.ok((await page.$$('#segments input[type=checkbox]')).length === 2, 'recordings list shows both segments');
    await page.fill('#segment-filter', 'trace.1');
    const shown = await page.$$eval('#segments tbody tr', (rows) => rows.filter((r) => !r.hidden).map((r) => [...r.cells].map((c) => c.textContent)));
    await page.fill('#segment-filter', '');
    t.ok(shown.length === 1 && shown[0][2] === '1' && /trace\.1/.test(shown[0][4]),
      'the filter keeps the matching segment; the pid has its own column', JSON.stringify(shown));
    await page.check('#segments input[value="metrics/1-1/trace.0.bin.gz"]');
    await page.click('#open-selected');
    await page.waitForFunction(() => window.d9.state === 'ready' || window.d9.state === 'error', null, { timeout: 60000 });
    t.ok(await page.evaluate(() => window.d9.events) === FIXTURE_EVENTS, `decoder reads all ${FIXTURE_EVENTS} events of the fixture`,
      await page.evaluate(() => `${window.d9.events} ${document.querySelector('#error').textContent}`));

    const facts = await t.checkRecordingView(page, 'dial9 fixture', { minWorkers: 2, longestAtLeastNs: 40e6 });
    t.ok(facts.stacks.length > 0 && facts.stacks.some((s) => /schedule|tokio|hyper/.test(s)),
      'the longest poll shows its captured stack, symbolized', facts.stacks.join('\n---\n').slice(0, 400));
    await t.shot(page, 'dial9-longest-poll');

    await page.selectOption('#flame-source', 'all');
    await page.waitForFunction(() => +document.querySelector('#flame').dataset.frames > 10);
    const frames = await page.evaluate(() => +document.querySelector('#flame').dataset.frames);
    t.ok(frames > 10, `flamegraph renders (${frames} frames drawn)`);
    const flamePixels = await page.evaluate(() => {
      const c = document.querySelector('#flame');
      const d = c.getContext('2d').getImageData(0, 0, c.width, Math.min(c.height, 60)).data;
      let coloured = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] > 100) coloured++;
      return coloured;
    });
    t.ok(flamePixels > 1000, 'flamegraph canvas has coloured frames', flamePixels);

    await page.click('#tabs [data-tab=summary]');
    const summary = await page.textContent('#tab-summary');
    t.ok(/tasks spawned\s*262/.test(summary) && /tasks terminated\s*359/.test(summary), 'summary shows spawn/terminate counts', summary.slice(0, 300));
    t.ok(/worker 0/.test(summary) && /%/.test(summary) && /p99/.test(summary), 'summary shows per-worker utilisation and percentiles');
    await t.shot(page, 'dial9-summary');

    await page.click('#tabs [data-tab=wakes]');
    t.ok((await page.$$('#tab-wakes li')).length > 0, 'wake-delay navigator lists polls');

    // several segments at once through the URL
    const p2 = await ctx.newPage();
    const two = await t.openViewer(p2, `${srv.url}#seg=metrics/1-1/trace.0.bin.gz&seg=metrics/1-1/trace.1.bin.gz`);
    t.ok(two.state === 'ready' && await p2.evaluate(() => window.d9.events) === 2 * FIXTURE_EVENTS, 'two segments open together');

    // a .gz file dropped on the page is gunzipped in the browser
    const p3 = await ctx.newPage();
    await p3.goto(srv.url);
    const b64 = fs.readFileSync(fixture).toString('base64');
    await p3.evaluate(async (data) => {
      const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], 'demo-trace.bin.gz'));
      document.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, b64);
    await p3.waitForFunction(() => window.d9.state === 'ready' || window.d9.state === 'error', null, { timeout: 60000 });
    t.ok(await p3.evaluate(() => window.d9.events) === FIXTURE_EVENTS, 'a dropped .gz file is decompressed in the browser and opens');
    await t.shot(p3, 'dial9-dropped');
  } finally {
    await close();
    srv.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
