// A real d9d recording of the mixed test target (busy_block_50ms once a
// second, sleep_block_20ms once a second) opened in the viewer.
// usage: node browser_recording.js DIR SEGMENT... (segments relative to DIR)
'use strict';
const { execFileSync } = require('child_process');
const path = require('path');
const t = require('./lib');

async function main() {
  const [dir, ...segs] = process.argv.slice(2);
  if (!segs.length) t.bail('no segments given');
  t.plan(28);
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

    // Under the worker lanes: tasks alive, queued (woken or spawned, not yet
    // polled) and being polled over time. Polls on one worker never overlap,
    // so "being polled" never exceeds the worker lanes; the mixed target
    // keeps its channel, timer and blocker tasks alive throughout.
    const chart = await page.evaluate(() => {
      const c = document.querySelector('#tasks-chart'), m = window.d9.model;
      const shown = JSON.parse(c.dataset.shown || '{}');
      const s = window.d9.taskChart.series;
      const workers = m.workers.filter((w) => w < 254).length;
      // independent count: tasks with a poll, spawn or terminate seen
      const seen = new Set([...m.polls.task, ...m.d.spawn.task, ...m.d.terminate.task]);
      const g = c.getContext('2d'), row = g.getImageData(0, 0, c.width, c.height).data;
      const colours = { alive: [0x8a, 0x9b, 0xd6], queued: [0xe0, 0xa0, 0x40], running: [0x3f, 0xae, 0x6a] };
      const px = {};
      for (const [k, [r, gg, b]] of Object.entries(colours)) {
        px[k] = 0;
        for (let i = 0; i < row.length; i += 4) px[k] += Math.abs(row[i] - r) < 24 && Math.abs(row[i + 1] - gg) < 24 && Math.abs(row[i + 2] - b) < 24;
      }
      return { shown, workers, seen: seen.size, maxAlive: s.alive.max, minAlive: Math.min(s.alive.start, ...s.alive.v), px, h: c.height,
        maxQueued: s.queued.max, maxRunning: s.running.max, note: c.dataset.note };
    });
    t.ok(chart.shown.running >= 1 && chart.shown.running <= chart.workers && chart.shown.queued >= 1,
      `task chart: at most ${chart.shown.running} polls at once on ${chart.workers} workers, up to ${chart.shown.queued} tasks queued`, JSON.stringify(chart));
    t.ok(chart.shown.alive >= 3 && chart.maxAlive <= chart.seen && chart.minAlive >= 0,
      `task chart: up to ${chart.shown.alive} tasks alive (of ${chart.seen} seen), never below 0`, JSON.stringify(chart));
    t.ok(chart.px.alive > 50 && chart.px.queued > 10 && chart.px.running > 10, 'the three series are drawn under the lanes', JSON.stringify(chart.px));
    t.ok(/alive before the recording/.test(chart.note) && /not counted/.test(chart.note),
      'the task chart says that tasks alive before the recording count from first sight, unseen ones not at all', chart.note);
    // d9ctl report --json: the same three series from its own pass over the
    // segments, text from the same document.
    const rep = JSON.parse(execFileSync(process.env.D9CTL, ['report', '--json', ...segs.map((x) => path.join(dir, x))], { encoding: 'utf8', maxBuffer: 1 << 26 })).tasks;
    const repText = execFileSync(process.env.D9CTL, ['report', ...segs.map((x) => path.join(dir, x))], { encoding: 'utf8', maxBuffer: 1 << 26 });
    t.ok(rep && rep.alive.peak === chart.maxAlive && rep.being_polled.peak === chart.maxRunning && rep.queued.peak === chart.maxQueued &&
      rep.seen + rep.alive_at_start === chart.seen,
      `d9ctl report's tasks: peak alive ${rep?.alive.peak} (chart ${chart.maxAlive}), being polled ${rep?.being_polled.peak} (${chart.maxRunning}), queued ${rep?.queued.peak} (${chart.maxQueued}), seen ${rep?.seen} + ${rep?.alive_at_start} only terminating (${chart.seen})`,
      JSON.stringify(rep));
    t.ok(new RegExp(`alive: at most ${rep?.alive.peak},`).test(repText) && new RegExp(`being polled: at most ${rep?.being_polled.peak} at once`).test(repText),
      'the report\'s text shows the same peaks', repText.split('\n').filter((l) => /alive|polled|queued/.test(l)).join(' | '));
    await page.locator('#tasks-chart').scrollIntoViewIfNeeded();
    await t.shot(page, 'recording-task-chart');

    // The recording list: pid, start and duration columns (start and
    // duration from each segment's first bytes, through d9ctl serve), and search.
    const wall = await page.evaluate(() => ({ t0: window.d9.model.t0, t1: window.d9.model.t1, off: window.d9.model.wallOffsetMs }));
    // The first segment's own ClockSyncEvent, read by the viewer's decoder:
    // the instant it was opened, its first event written.
    await t.openViewer(page, `${srv.url}#seg=${encodeURIComponent(segs[0])}`);
    const sync0 = await page.evaluate(() => { const c = window.d9.model.d.clockSyncs[0]; return Number(c.realtime / 1000n) / 1e3; });
    await page.goto(srv.url);
    await page.waitForFunction((n) => +document.querySelector('#segments')?.dataset.infoFilled === n, segs.length, { timeout: 30000 });
    const rows = await page.$$eval('#segments tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)));
    const head = await page.$$eval('#segments thead th', (ths) => ths.map((th) => th.textContent));
    const col = (name) => head.indexOf(name);
    const toNs = (x) => { const m = /^([\d.]+) (ns|µs|ms|s)$/.exec(x); return m ? +m[1] * { ns: 1, 'µs': 1e3, ms: 1e6, s: 1e9 }[m[2]] : NaN; };
    const starts = rows.map((r) => Date.parse(r[col('start (UTC)')].replace(' ', 'T') + 'Z'));
    const durs = rows.map((r) => toNs(r[col('duration')]) / 1e6);
    const ends = starts.map((s, i) => s + durs[i]);
    const firstEvent = wall.off + wall.t0 / 1e6, lastEvent = wall.off + wall.t1 / 1e6;
    t.ok(rows.length === segs.length && Math.abs(starts[0] - sync0) <= 1,
      `listing start of the first segment ${rows[0]?.[col('start (UTC)')]} is its ClockSyncEvent (${(starts[0] - sync0).toFixed(1)} ms off)`, JSON.stringify({ head, rows: rows.slice(0, 3), sync0 }));
    const tiled = starts.every((s, i) => i === 0 || (s >= starts[i - 1] && s >= ends[i - 1] - 1 && s - ends[i - 1] < 1000));
    t.ok(durs.every((d) => d > 0) && tiled && starts[0] <= firstEvent + 1 && ends[ends.length - 1] >= lastEvent - 1,
      `${rows.length} segments follow each other (${durs.map((d) => d.toFixed(0)).join(', ')} ms) and cover the recording's first to last event`,
      JSON.stringify({ starts, durs, firstEvent, lastEvent }));
    const pid = rows[0]?.[col('pid')];
    await page.fill('#segment-filter', `${pid} ${rows[rows.length - 1][col('start (UTC)')]}`);
    const visible = await page.$$eval('#segments tbody tr', (trs) => trs.filter((tr) => !tr.hidden).length);
    await page.fill('#segment-filter', 'no-such-service-xyz');
    const none = await page.$$eval('#segments tbody tr', (trs) => trs.filter((tr) => !tr.hidden).length);
    t.ok(/^\d+$/.test(pid) && visible === 1 && none === 0,
      `search by pid ${pid} and start time keeps ${visible} row(s), a miss none`, JSON.stringify({ visible, none }));
    await page.fill('#segment-filter', '');
    // Every segment d9d sealed says its span in its first bytes: none of
    // them was decoded for the listing.
    const sources = await page.$$eval('#segments tbody tr', (trs) => trs.map((tr) => tr.dataset.source));
    t.ok(sources.length === segs.length && sources.every((x) => x === 'header'),
      `start and duration of all ${sources.length} segments read from their first bytes (source: ${[...new Set(sources)].join(',')})`);
    // Sortable columns; the filter keeps working on sorted rows.
    const order = (attr) => page.$$eval('#segments tbody tr', (trs, a) => trs.map((tr) => Number(tr.dataset[a])), attr);
    const sorted = (a, dir) => a.every((x, i) => i === 0 || dir * (x - a[i - 1]) >= 0);
    await page.click('#segments th[data-sort=duration]');
    const up = await order('durationNs');
    await page.click('#segments th[data-sort=duration]');
    const down = await order('durationNs');
    const arrow = await page.getAttribute('#segments th[data-sort=duration]', 'aria-sort');
    t.ok(up.length === segs.length && sorted(up, 1) && sorted(down, -1) && arrow === 'descending' && (up.length < 2 || up[0] !== down[0] || up.every((x) => x === up[0])),
      `duration sorts both ways (${up.map((x) => (x / 1e6).toFixed(0)).join(', ')} ms)`, JSON.stringify({ up, down, arrow }));
    await page.click('#segments th[data-sort=start]');
    const byStart = await order('startNs');
    await page.fill('#segment-filter', `${pid} ${rows[0][col('start (UTC)')]}`);
    const kept = await page.$$eval('#segments tbody tr', (trs) => trs.filter((tr) => !tr.hidden).map((tr) => tr.querySelector('.seg-start').textContent));
    t.ok(sorted(byStart, 1) && kept.length === 1 && kept[0] === rows[0][col('start (UTC)')],
      'sorted by start, the filter still keeps the one row it matches', JSON.stringify({ byStart, kept }));
    await page.fill('#segment-filter', '');
    await page.click('#segments th[data-sort=duration]');
    await t.shot(page, 'recording-listing-sorted');
    await t.shot(page, 'recording-listing');
  } finally {
    await close();
    srv.stop();
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
