// Shared helpers for the viewer tests: TAP output, a `d9ctl serve` child
// process on a free loopback port, headless Debian chromium via
// playwright-core, and the page-level checks any recording must pass.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn } = require('child_process');

let planned = 0, failed = 0, n = 0;
function plan(count) { planned = count; console.log(`1..${count}`); }
function ok(cond, name, diag) {
  n++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond) { failed++; if (diag !== undefined) console.log(`# ${String(diag).split('\n').join('\n# ')}`); }
  return cond;
}
function bail(msg) { console.log(`Bail out! ${msg}`); process.exit(1); }
function done() {
  if (n !== planned) console.log(`# ran ${n} of ${planned} planned tests`);
  process.exit(failed || n !== planned ? 1 : 0);
}

function env(name) {
  const v = process.env[name];
  if (!v) bail(`${name} is not set (run through meson test)`);
  return v;
}

function tmpdir(tag) { return fs.mkdtempSync(path.join(os.tmpdir(), `d9-viewer-${tag}-`)); }

function fixturePath() {
  const p = env('D9_DIAL9_FIXTURE');
  if (!fs.existsSync(p)) bail(`dial9 fixture missing: ${p} (expected shared/ next to the source tree)`);
  return p;
}

function artifactsDir() {
  const d = env('D9_ARTIFACTS');
  fs.mkdirSync(d, { recursive: true });
  return d;
}

// Starts `d9ctl serve --dir DIR --listen 127.0.0.1:0` (no --dir when DIR is
// empty, for --bucket in extraArgs) and resolves with the URL it prints.
function startServe(dir, extraArgs = []) {
  const where = dir ? ['--dir', dir] : [];
  const proc = spawn(env('D9CTL'), ['serve', ...where, '--listen', '127.0.0.1:0', ...extraArgs],
    { env: { ...process.env, D9_VIEWER_DIR: env('D9_VIEWER_DIR') }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  proc.stderr.on('data', (b) => { err += b; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`d9ctl serve did not start: ${err}`)), 10000);
    proc.stdout.on('data', (b) => {
      out += b;
      const m = /serving (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        // anything the server logged (sanitizer reports included) ends up in the test log
        proc.on('exit', () => { if (err.trim()) console.log(`# d9ctl serve stderr: ${err.trim().split('\n').join('\n# ')}`); });
        resolve({ url: m[1], proc, stop: () => proc.kill('SIGTERM') });
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`d9ctl serve exited ${code}: ${err}`)); });
  });
}

// The token d9ctl serve printed (in its URL) as a header for scripted
// requests; browsers get the cookie from the first page instead.
function authHeaders(url) {
  const token = new URL(url).searchParams.get('token');
  return token ? { Authorization: `Bearer ${token}` } : {};
}

function playwright() {
  const p = path.join(__dirname, 'node_modules', 'playwright-core');
  if (!fs.existsSync(p)) bail(`playwright-core not installed in ${p}: run scripts/bootstrap (scripts/bootstrap.d/20-viewer-npm)`);
  return require(p);
}

async function launchBrowser() {
  const userData = tmpdir('chromium');
  const ctx = await playwright().chromium.launchPersistentContext(userData, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1500, height: 950 },
    // Playwright's own polling evaluates strings in the page, which the
    // server's script-src 'self' policy forbids; the app itself never evals.
    bypassCSP: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const close = async () => { await ctx.close(); fs.rmSync(userData, { recursive: true, force: true }); };
  return { ctx, close, userData };
}

// Opens URL and waits until the viewer reports 'ready' or 'error'.
async function openViewer(page, url, timeout = 60000) {
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(url);
  await page.waitForFunction(() => window.d9 && (window.d9.state === 'ready' || window.d9.state === 'error'), null, { timeout });
  return { state: await page.evaluate(() => window.d9.state), errors };
}

async function shot(page, name) {
  const file = path.join(artifactsDir(), `${name}.png`);
  await page.screenshot({ path: file });
  console.log(`# screenshot ${file}`);
}

// Checks that hold for any real recording opened in the viewer: worker lanes
// exist, the longest-polls list is sorted and clickable, a clicked poll shows
// details, and the flamegraph draws. Returns the facts for further checks.
async function checkRecordingView(page, label, expect = {}) {
  const facts = await page.evaluate(() => {
    const m = window.d9.model;
    const dur = (p) => m.polls.end[p] - m.polls.start[p];
    return {
      workers: m.workers,
      polls: m.polls.n,
      longest: [...document.querySelectorAll('#tab-longest li')].map((li) => dur(+li.dataset.poll)),
      firstLongest: +(document.querySelector('#tab-longest li')?.dataset.poll ?? -1),
    };
  });
  ok(facts.workers.filter((w) => w < 254).length >= (expect.minWorkers || 1),
    `${label}: timeline has worker lanes (${facts.workers.join(',')})`);
  ok(facts.longest.length > 0 && facts.longest.every((d, i) => i === 0 || facts.longest[i - 1] >= d),
    `${label}: longest polls list is non-empty and sorted by duration`, facts.longest.slice(0, 5).join(' '));
  if (expect.longestAtLeastNs)
    ok(facts.longest[0] >= expect.longestAtLeastNs, `${label}: top longest poll lasts >= ${expect.longestAtLeastNs / 1e6} ms`, facts.longest[0]);

  await page.click('#tabs [data-tab=longest]');
  await page.click('#tab-longest li >> nth=0');
  await page.waitForSelector('#tab-details .poll-duration');
  const details = await page.textContent('#tab-details');
  ok(/task\s*\d+/.test(details) && /duration/.test(details), `${label}: clicking the longest poll shows its task and duration`, details.slice(0, 200));

  // A real mouse click on the poll's rectangle in the canvas selects it too.
  await page.evaluate(() => { window.d9.selectedPoll = -1; document.querySelector('#tab-details').innerHTML = ''; });
  const pt = await page.evaluate((p) => window.d9.timeline.pollClientPoint(p), facts.firstLongest);
  await page.mouse.click(pt.x, pt.y);
  await page.waitForSelector('#tab-details .poll-duration', { timeout: 5000 }).catch(() => {});
  ok(await page.evaluate(() => window.d9.selectedPoll) === facts.firstLongest,
    `${label}: clicking the poll on the timeline canvas selects it`);

  const stacks = await page.$$eval('#tab-details pre.stack', (els) => els.map((e) => e.textContent));
  facts.stacks = stacks;
  const frames = await page.evaluate(() => +document.querySelector('#flame').dataset.frames);
  const flameSamples = await page.textContent('#flame-info');
  facts.flameFrames = frames;
  facts.flameInfo = flameSamples;
  return facts;
}

module.exports = { authHeaders, plan, ok, bail, done, env, tmpdir, fixturePath, artifactsDir, startServe, launchBrowser, openViewer, shot, checkRecordingView };
