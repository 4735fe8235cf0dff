// d9ctl serve over real HTTP: listing, decompression (gzip, zstd, raw),
// concatenation, and refusal of every path trick that could leave --dir.
'use strict';
const fs = require('fs');
const path = require('path');
const http = require('http');
const zlib = require('zlib');
const { execFileSync, spawnSync } = require('child_process');
const t = require('./lib');

function get(base, rawPath, method = 'GET', headers = {}) {
  const u = new URL(base);
  headers = { ...t.authHeaders(base), ...headers };
  return new Promise((resolve, reject) => {
    // http.request sends the path byte-for-byte: no client-side normalisation
    const req = http.request({ host: u.hostname, port: u.port, path: rawPath, method, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function main() {
  const fixture = t.fixturePath();
  const raw = zlib.gunzipSync(fs.readFileSync(fixture));
  const top = t.tmpdir('serve');
  const root = path.join(top, 'root'), outside = path.join(top, 'outside');
  const seg = path.join(root, 'demo', '4242-777');
  const d9 = path.join(root, 'pfx', '2026-05-15', '1755', 'metrics', 'host-a', 'abcd-4242');
  fs.mkdirSync(seg, { recursive: true });
  fs.mkdirSync(d9, { recursive: true });
  fs.mkdirSync(outside);
  fs.copyFileSync(fixture, path.join(seg, 'trace.0.bin.gz'));
  execFileSync('zstd', ['-q', '-o', path.join(seg, 'trace.1.bin.zst')], { input: raw });
  fs.writeFileSync(path.join(seg, 'trace.2.bin'), raw);
  fs.copyFileSync(fixture, path.join(d9, '1778867710-0.bin.gz'));
  fs.writeFileSync(path.join(seg, 'trace.3.bin.gz'), fs.readFileSync(fixture).subarray(0, 5000));
  fs.writeFileSync(path.join(outside, 'secret.bin'), 'SECRET');
  fs.symlinkSync(path.join(outside, 'secret.bin'), path.join(seg, 'escape.bin'));
  fs.symlinkSync('../../../outside', path.join(seg, 'outdir'));
  // Segments as d9d seals them (its writer and sealer), 400,000 events each,
  // and a copy of the zstd one with 64 bytes smashed in its middle: a
  // listing that decoded segments whole could not read that one.
  const sealedDir = path.join(root, 'listing', '4343-888');
  const sealed = Object.fromEntries(['zstd', 'gzip', 'none'].map((kind, i) => [kind,
    execFileSync(process.env.D9_SEALED_SEGMENT, [sealedDir, String(i), kind, '200000'], { encoding: 'utf8' }).trim()]));
  const smashed = Buffer.from(fs.readFileSync(sealed.zstd));
  smashed.fill(0xff, smashed.length >> 1, (smashed.length >> 1) + 64);
  fs.writeFileSync(path.join(sealedDir, 'trace.7.bin.zst'), smashed);

  t.plan(34);
  const bad = spawnSync(process.env.D9CTL, ['serve'], { encoding: 'utf8' });
  t.ok(bad.status === 2 && bad.stderr.trim().split('\n').length === 1, 'serve without --dir/--bucket fails with one line', bad.stderr);
  const badListen = spawnSync(process.env.D9CTL, ['serve', '--dir', root, '--listen', 'nonsense'], { encoding: 'utf8', env: { ...process.env } });
  t.ok(badListen.status !== 0 && /bad --listen/.test(badListen.stderr), 'serve rejects a malformed --listen', badListen.stderr);

  const srv = await t.startServe(root);
  try {
    const q = (p) => `/api/trace?seg=${encodeURIComponent(p)}`;
    const list = JSON.parse((await get(srv.url, '/api/list')).body);
    const by = Object.fromEntries(list.segments.map((s) => [s.path, s]));
    const ours = by['demo/4242-777/trace.1.bin.zst'];
    t.ok(ours && ours.layout === 'd9d' && ours.service === 'demo' && ours.instance === '4242-777' && ours.index === 1 && ours.compression === 'zstd',
      'listing describes a d9d segment (service, pid-start, index, zstd)', JSON.stringify(ours));
    const theirs = by['pfx/2026-05-15/1755/metrics/host-a/abcd-4242/1778867710-0.bin.gz'];
    t.ok(theirs && theirs.layout === 'dial9' && theirs.service === 'metrics' && theirs.instance === 'host-a' && theirs.boot === 'abcd-4242' && theirs.start === 1778867710,
      "listing parses dial9's date/minute/service/instance/boot key layout", JSON.stringify(theirs));
    t.ok(!list.segments.some((s) => /escape|outdir|secret/.test(s.path)), 'listing does not follow symlinks');

    let r = await get(srv.url, q('demo/4242-777/trace.0.bin.gz'));
    t.ok(r.status === 200 && r.body.equals(raw), 'gzip segment is served decompressed, byte-identical');
    r = await get(srv.url, q('demo/4242-777/trace.1.bin.zst'));
    t.ok(r.status === 200 && r.body.equals(raw), 'zstd segment is served decompressed, byte-identical');
    r = await get(srv.url, `${q('demo/4242-777/trace.2.bin')}&seg=${encodeURIComponent('demo/4242-777/trace.1.bin.zst')}`);
    t.ok(r.status === 200 && r.body.equals(Buffer.concat([raw, raw])), 'two segments are served concatenated');
    r = await get(srv.url, q('demo/4242-777/trace.3.bin.gz'));
    t.ok(r.status === 422 && /corrupt/.test(r.body), 'truncated gzip segment gets 422 with a message', `${r.status} ${r.body}`);

    const refuse = async (rawPath, want, name) => {
      const res = await get(srv.url, rawPath);
      t.ok(want.includes(res.status) && !res.body.includes('SECRET') && !res.body.includes('root:'), name, `${res.status} ${res.body.toString().slice(0, 100)}`);
    };
    await refuse('/api/trace?seg=../outside/secret.bin', [400], 'refuses ".." in a segment path');
    await refuse('/api/trace?seg=/etc/passwd', [400], 'refuses an absolute segment path');
    await refuse('/api/trace?seg=%2e%2e/outside/secret.bin', [400], 'refuses percent-encoded %2e%2e');
    await refuse('/api/trace?seg=demo%2f..%2f..%2foutside%2fsecret.bin', [400], 'refuses encoded slashes around ..');
    await refuse(q('demo/4242-777/escape.bin'), [403], 'refuses a symlink that points outside the root');
    await refuse(q('demo/4242-777/outdir/secret.bin'), [403], 'refuses a symlinked directory that leads outside');
    await refuse('/api/trace?seg=demo%00/../../outside/secret.bin', [400], 'refuses an embedded NUL');
    await refuse('/static/../../../../etc/passwd', [400], 'refuses ".." in an asset path');
    await refuse('/static/%2e%2e/%2e%2e/etc/passwd', [400], 'refuses encoded ".." in an asset path');
    await refuse(q('demo/nothing.bin'), [404], 'missing segment is a 404');

    // /api/info: the listing's start and duration. Expected values from
    // d9ctl dump's events: the first written (ts > 0) and the latest.
    const dumped = execFileSync(process.env.D9CTL, ['dump', '--json', path.join(seg, 'trace.2.bin')], { encoding: 'utf8', maxBuffer: 1 << 28 })
      .split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const stamped = dumped.filter((e) => e.ts > 0);
    const first = stamped[0].ts, last = stamped.reduce((a, e) => (e.ts > a ? e.ts : a), 0);
    const sync = dumped.find((e) => e.event === 'ClockSyncEvent');
    const info = async (p) => { const res = await get(srv.url, `/api/info?seg=${encodeURIComponent(p)}`); return { status: res.status, j: res.status === 200 ? JSON.parse(res.body) : null, body: res.body.toString() }; };
    const infos = await Promise.all(['trace.0.bin.gz', 'trace.1.bin.zst', 'trace.2.bin'].map((f) => info(`demo/4242-777/${f}`)));
    const i0 = infos[2].j;
    t.ok(infos.every((x) => x.status === 200 && JSON.stringify({ ...x.j, path: 0 }) === JSON.stringify({ ...i0, path: 0 })),
      'info is the same for the gzip, zstd and raw copies', JSON.stringify(infos));
    t.ok(i0 && i0.source === 'decoded' && i0.events === stamped.length && Math.abs(i0.duration_ns - (last - first)) < 1000,
      `info on dial9's segment (no span event: decoded): ${i0?.events} events (dump: ${stamped.length} stamped), ${i0?.duration_ns} ns from the first written to the latest (dump: ${last - first})`, JSON.stringify(i0));
    const wantStart = sync ? BigInt(sync.fields.realtime_ns) + BigInt(first) - BigInt(sync.ts) : null;
    t.ok(i0 && sync && Math.abs(Number(BigInt(i0.start_ns) - wantStart)) < 1000, `info start_ns is the first event's wall clock (${i0?.start_ns}, want ${wantStart})`);
    // d9d's sealed segments: read from their first bytes, the same numbers
    // as a whole decode of the same file (d9ctl dump).
    const rel = (f) => path.relative(root, f);
    const sinfo = await Promise.all(Object.values(sealed).map((f) => info(rel(f))));
    const whole = (f) => {
      const sd = execFileSync(process.env.D9CTL, ['dump', '--json', f], { encoding: 'utf8', maxBuffer: 1 << 30 })
        .split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l)).filter((e) => e.ts > 0 && e.event !== 'D9SegmentSpanEvent');
      const first = sd[0].ts, last = sd.reduce((a, e) => (e.ts > a ? e.ts : a), 0);
      const sync = sd.find((e) => e.event === 'ClockSyncEvent');
      return { events: sd.length, duration_ns: last - first, start_ns: Number(BigInt(sync.fields.realtime_ns) + BigInt(first) - BigInt(sync.ts)) };
    };
    const wants = Object.values(sealed).map(whole);
    const wantS = wants[0];
    t.ok(sinfo.every((x, i) => x.status === 200 && x.j.source === 'header' && x.j.events === wants[i].events && x.j.duration_ns === wants[i].duration_ns &&
      Math.abs(x.j.start_ns - wants[i].start_ns) < 1000),
      `info on d9d's zstd, gzip and raw segments comes from their first bytes and equals a whole decode by d9ctl dump (${wantS.events} events, ${wantS.duration_ns} ns)`,
      JSON.stringify({ sinfo: sinfo.map((x) => x.j || x.body), wants }));
    const sm = await info('listing/4343-888/trace.7.bin.zst');
    const smTrace = await get(srv.url, q('listing/4343-888/trace.7.bin.zst'));
    t.ok(sm.status === 200 && sm.j.source === 'header' && sm.j.events === wantS.events && sm.j.duration_ns === wantS.duration_ns && smTrace.status === 422,
      `a sealed segment smashed in its middle still lists (${sm.status}, ${sm.j?.source}) while serving it whole fails (${smTrace.status}): the listing read only its head`,
      JSON.stringify({ sm: sm.j || sm.body }));
    const st = fs.statSync(sealed.zstd).size;
    t.ok(st > 64 * 1024, `the sealed zstd segment (${st} bytes) is far more than the 16 KiB a listing reads`);
    const list2 = JSON.parse((await get(srv.url, '/api/list')).body);
    t.ok(list2.segments.filter((x) => x.path.startsWith('listing/')).length === 4, 'the sealed segments are listed');
    let ri = await info('demo/4242-777/trace.3.bin.gz');
    t.ok(ri.status === 422, 'info on a truncated gzip segment: 422', `${ri.status} ${ri.body}`);
    for (const [p, want, name] of [['../outside/secret.bin', 400, '".."'], ['demo/4242-777/escape.bin', 403, 'a symlink out of the root'], ['demo/nothing.bin', 404, 'a missing segment']]) {
      ri = await info(p);
      t.ok(ri.status === want && !ri.body.includes('SECRET'), `info refuses ${name} (${ri.status})`, ri.body);
    }
    r = await get(srv.url, '/');
    t.ok(r.status === 200 && /<canvas id="timeline"/.test(r.body), 'serves the viewer page at /');
    r = await get(srv.url, '/api/list', 'POST');
    t.ok(r.status === 405, 'non-GET requests get 405');
    r = await get(srv.url, '/api/list', 'GET', { Host: `rebind.example:${new URL(srv.url).port}` });
    t.ok(r.status === 403 && !r.body.includes('segments'), 'a non-loopback Host header is refused (DNS rebinding)', r.status);
    r = await get(srv.url, '/', 'GET', { Host: `localhost:${new URL(srv.url).port}` });
    t.ok(r.status === 200 && /default-src 'self'/.test(r.headers['content-security-policy']),
      'localhost is accepted as Host; pages carry a self-only Content-Security-Policy', JSON.stringify(r.headers));
  } finally {
    srv.stop();
    fs.rmSync(top, { recursive: true, force: true });
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
