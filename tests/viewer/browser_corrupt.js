// Damaged input must produce a clear error in the page, not a blank view.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const t = require('./lib');

async function main() {
  const raw = zlib.gunzipSync(fs.readFileSync(t.fixturePath()));
  const root = t.tmpdir('corrupt');
  const dir = path.join(root, 'svc', '1-1');
  fs.mkdirSync(dir, { recursive: true });
  // a frame tag no reader knows, in the middle of otherwise good data
  const badTag = Buffer.from(raw.subarray(0, 200000));
  const cut = firstEventFrameAfter(badTag, 100000);
  badTag[cut] = 0x99;
  fs.writeFileSync(path.join(dir, 'trace.0.bin'), badTag);
  fs.writeFileSync(path.join(dir, 'trace.1.bin'), Buffer.from('this is not a trace at all'));
  fs.writeFileSync(path.join(dir, 'trace.2.bin.gz'), zlib.gzipSync(raw).subarray(0, 3000));
  // a segment still being written: a clean cut mid-frame is not an error
  fs.writeFileSync(path.join(dir, 'trace.3.bin.active'), raw.subarray(0, firstEventFrameAfter(raw, raw.length / 2) + 3));

  const cases = [
    ['trace.0.bin', /unknown frame tag 0x99 at byte \d+/, 'unknown frame tag'],
    ['trace.1.bin', /not a dial9 trace/, 'a file that is not a trace'],
    ['trace.2.bin.gz', /corrupt compressed segment/, 'a truncated gzip segment'],
  ];
  t.plan(cases.length * 2 + 1);
  const srv = await t.startServe(root);
  const { ctx, close } = await t.launchBrowser();
  try {
    for (const [file, re, what] of cases) {
      const page = await ctx.newPage();
      const r = await t.openViewer(page, `${srv.url}#seg=svc/1-1/${file}`);
      const err = await page.textContent('#error');
      const visible = await page.isVisible('#error');
      t.ok(r.state === 'error' && visible, `${what}: the page is in the error state with a visible message`);
      t.ok(re.test(err) && err.includes(file), `${what}: message names the segment and the problem`, err);
      await t.shot(page, `corrupt-${file}`);
    }
    const page = await ctx.newPage();
    const r = await t.openViewer(page, `${srv.url}#seg=svc/1-1/trace.3.bin.active`);
    t.ok(r.state === 'ready' && /truncated tail ignored/.test(await page.textContent('#status')),
      'a segment cut mid-frame opens, noting the truncated tail', await page.textContent('#status'));
  } finally {
    await close();
    srv.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  t.done();
}

// Byte offset of an event frame (tag 0x02) found by walking frames is more
// work than needed here; a stream header is an unambiguous frame boundary.
function firstEventFrameAfter(buf, from) {
  const i = buf.indexOf(Buffer.from('TRC\0\x01', 'binary'), from);
  if (i < 0) throw new Error('no stream header after offset');
  return i + 5;
}

main().catch((e) => t.bail(e.stack));
