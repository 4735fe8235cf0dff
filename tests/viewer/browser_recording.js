// A real d9d recording of the mixed test target (busy_block_50ms once a
// second, sleep_block_20ms once a second) opened in the viewer.
// usage: node browser_recording.js DIR SEGMENT... (segments relative to DIR)
'use strict';
const t = require('./lib');

async function main() {
  const [dir, ...segs] = process.argv.slice(2);
  if (!segs.length) t.bail('no segments given');
  t.plan(16);
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

    // Prev/Next step through the longest polls without leaving the list.
    await page.click('#tabs [data-tab=longest]');
    const listed = await page.$$eval('#tab-longest li', (els) => els.map((e) => +e.dataset.poll));
    await page.click('#tab-longest [data-step="1"]');
    await page.click('#tab-longest [data-step="1"]');
    const second = await page.evaluate(() => ({ p: window.d9.selectedPoll, pos: document.querySelector('#tab-longest .poi-pos').textContent,
      tab: document.querySelector('.tab.active').id }));
    await page.keyboard.press('p');
    const back = await page.evaluate(() => window.d9.selectedPoll);
    t.ok(second.p === listed[1] && second.pos === `2/${listed.length}` && second.tab === 'tab-longest' && back === listed[0],
      'Next twice selects the second longest poll and keeps the list open; p steps back', JSON.stringify({ second, back, first: listed.slice(0, 2) }));
    await t.shot(page, 'recording-poi-next');

    // The selected poll's task gets a lane of its own: all its polls, on any
    // worker, drawn under the workers.
    const lane = await page.evaluate(() => {
      const m = window.d9.model, tl = window.d9.timeline, p = window.d9.selectedPoll, id = m.polls.task[p];
      let n = 0;
      for (let i = 0; i < m.polls.n; i++) n += m.polls.task[i] === id;
      const info = JSON.parse(tl.c.dataset.taskLane || '{}');
      const dpr = window.devicePixelRatio || 1, g = tl.c.getContext('2d');
      const x = Math.floor(((Math.max(84, tl.x(m.polls.start[p])) + Math.min(tl.w, tl.x(m.polls.end[p]))) / 2) * dpr);
      const y = Math.floor((tl.laneY(tl.lanes.length) + 15) * dpr);
      const px = [...g.getImageData(x, y, 1, 1).data.slice(0, 3)];
      return { id, n, info, px };
    });
    t.ok(lane.info.task === lane.id && lane.info.polls === lane.n && !(lane.px[0] === 0x1a && lane.px[1] === 0x1d),
      `a lane for task ${lane.id} holds its ${lane.n} polls, the selected one drawn on it`, JSON.stringify(lane));

    // Scheduler delay: woken workers that waited for a CPU, each leading to
    // the poll the worker ran next.
    await page.click('#tabs [data-tab=sched]');
    const sched = await page.$$eval('#tab-sched li', (els) => els.map((e) => [+e.dataset.poll, e.textContent]));
    if (sched.length) await page.click('#tab-sched li >> nth=0');
    const after = await page.evaluate(() => window.d9.selectedPoll);
    t.ok(sched.length > 0 && after === sched[0][0], `the scheduler-delay list has ${sched.length} rows; a row selects the poll that followed`,
      JSON.stringify(sched.slice(0, 3)));

    // The side panel's tables fit it: the numbers (p50 ...) are not cut off.
    await page.click('#tabs [data-tab=summary]');
    const fit = await page.evaluate(() => {
      const side = document.querySelector('#side').getBoundingClientRect();
      const cells = [...document.querySelectorAll('#tab-summary th, #tab-summary td')];
      const out = cells.filter((c) => c.getBoundingClientRect().right > side.right + 1).map((c) => c.textContent);
      const p50 = cells.find((c) => c.textContent === 'p50');
      return { out: out.slice(0, 5), n: out.length, p50: p50 && p50.getBoundingClientRect().right <= side.right, side: side.width };
    });
    t.ok(fit.n === 0 && fit.p50, `every summary cell lies inside the ${fit.side} px panel (p50 visible)`, JSON.stringify(fit));
    await t.shot(page, 'recording-summary');
    await page.click('#tabs [data-tab=busiest]');
    const busiestOut = await page.evaluate(() => {
      const side = document.querySelector('#side').getBoundingClientRect();
      return [...document.querySelectorAll('#tab-busiest td')].filter((c) => c.getBoundingClientRect().right > side.right + 1).length;
    });
    t.ok(busiestOut === 0, `every busiest-futures cell lies inside the panel (${busiestOut} outside)`);

    await page.selectOption('#flame-source', 'all');
    await page.dblclick('#timeline');
    await page.waitForFunction(() => +document.querySelector('#flame').dataset.frames > 1, null, { timeout: 10000 }).catch(() => {});
    const frames = await page.evaluate(() => +document.querySelector('#flame').dataset.frames);
    t.ok(frames > 1, `flamegraph renders the recording's samples (${frames} frames)`);
    await t.shot(page, 'recording-flamegraph');

    // At full zoom the sample row is not an alarm: off-CPU time outside a
    // poll (a worker waiting for work) is dim, red is kept for off-CPU
    // inside a poll (the thread blocked while polling): the pixels tell.
    const px = await page.evaluate(() => {
      const c = document.querySelector('#timeline'), g = c.getContext('2d'), tl = window.d9.timeline;
      const dpr = window.devicePixelRatio || 1;
      let red = 0, dim = 0, blue = 0;
      tl.lanes.forEach((w, i) => {
        if (w >= 254) return;
        const y = Math.floor((tl.laneY(i) + 34) * dpr); // the middle of the sample marks (MARK_Y 31, MARK_H 7)
        const row = g.getImageData(0, y, c.width, 1).data;
        for (let x = 0; x < c.width; x++) {
          const [r, gg, b] = [row[4 * x], row[4 * x + 1], row[4 * x + 2]];
          if (r === 255 && gg === 107 && b === 107) red++;
          else if (r === 106 && gg === 85 && b === 96) dim++;
          else if (r === 107 && gg === 182 && b === 255) blue++;
        }
      });
      return { red, dim, blue, cols: JSON.parse(c.dataset.sampleColumns || '{}') };
    });
    t.ok(px.cols.idle > 0 && px.dim > 0 && px.red <= (px.red + px.dim + px.blue) / 2,
      `worker sample rows: ${px.red} red (blocked in a poll), ${px.dim} dim (waiting), ${px.blue} blue (on CPU) pixels`, JSON.stringify(px));
    t.ok(px.cols.blocking > 0 && px.red > 0, 'the 20 ms thread::sleep polls still show red (off-CPU inside a poll)', JSON.stringify(px.cols));
    await t.shot(page, 'recording-sample-rows');
  } finally {
    await close();
    srv.stop();
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
