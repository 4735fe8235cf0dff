// A real d9d recording of the mixed test target (busy_block_50ms once a
// second, sleep_block_20ms once a second) opened in the viewer.
// usage: node browser_recording.js DIR SEGMENT... (segments relative to DIR)
'use strict';
const t = require('./lib');

async function main() {
  const [dir, ...segs] = process.argv.slice(2);
  if (!segs.length) t.bail('no segments given');
  t.plan(9);
  const srv = await t.startServe(dir);
  const { ctx, close } = await t.launchBrowser();
  try {
    const page = await ctx.newPage();
    const r = await t.openViewer(page, `${srv.url}#${segs.map((s) => `seg=${encodeURIComponent(s)}`).join('&')}`);
    t.ok(r.state === 'ready', `the recording (${segs.length} segment(s)) opens`, await page.textContent('#error'));
    const facts = await t.checkRecordingView(page, 'd9d recording', { minWorkers: 2, longestAtLeastNs: 45e6 });
    await t.shot(page, 'recording-longest-poll');

    // The 50 ms blocking polls lead "longest polls", labelled by their future.
    // (On a loaded machine a preempted ordinary poll can slip in between.)
    const top = await page.$$eval('#tab-longest li', (els) => els.slice(0, 6).map((e) => e.textContent));
    const blockers = top.filter((x) => /blocker/.test(x)).length;
    t.ok(blockers >= 3 && /blocker/.test(top[0] + top[1]), `the blocker future's polls lead the longest polls (${blockers} of the top 6)`, top.join('\n'));

    // Clicking them shows the stacks captured inside; the busy one names
    // busy_block_50ms.
    let named = false;
    for (let i = 0; i < 4 && !named; i++) {
      await page.click('#tabs [data-tab=longest]');
      await page.click(`#tab-longest li >> nth=${i}`);
      await page.waitForSelector('#tab-details .poll-duration');
      const stacks = await page.$$eval('#tab-details pre.stack', (els) => els.map((e) => e.textContent));
      named = stacks.some((s) => /busy_block_50ms/.test(s));
      if (named) await t.shot(page, 'recording-blocking-poll-stack');
    }
    t.ok(named, 'a clicked 50 ms poll shows a CPU stack naming busy_block_50ms');

    await page.selectOption('#flame-source', 'all');
    await page.dblclick('#timeline');
    await page.waitForFunction(() => +document.querySelector('#flame').dataset.frames > 1, null, { timeout: 10000 }).catch(() => {});
    const frames = await page.evaluate(() => +document.querySelector('#flame').dataset.frames);
    t.ok(frames > 1, `flamegraph renders the recording's samples (${frames} frames)`);
    await t.shot(page, 'recording-flamegraph');
  } finally {
    await close();
    srv.stop();
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
