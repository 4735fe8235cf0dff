// d9ctl serve --bucket against a real S3 endpoint (Swift + s3api started by
// tests/s3/swift-harness): objects uploaded with dial9's key layout are
// listed relative to --prefix, fetched decompressed and concatenated, and a
// path cannot reach keys outside the prefix.
'use strict';
const fs = require('fs');
const path = require('path');
const http = require('http');
const zlib = require('zlib');
const crypto = require('crypto');
const { execFileSync } = require('child_process');
const t = require('./lib');

const BUCKET = 'd9-viewer';

// PUT with a SigV4 signature (the S3 access key "account:user" contains a
// colon, which curl's --aws-sigv4 --user cannot carry).
function s3put(key, file) {
  const body = fs.readFileSync(file);
  const ep = new URL(t.env('D9_S3_ENDPOINT'));
  const region = process.env.D9_S3_REGION || 'us-east-1';
  const sha = (x) => crypto.createHash('sha256').update(x).digest('hex');
  const hmac = (k, x) => crypto.createHmac('sha256', k).update(x).digest();
  const amzDate = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+/, '');
  const day = amzDate.slice(0, 8), scope = `${day}/${region}/s3/aws4_request`;
  const uri = `/${BUCKET}/${key.split('/').map(encodeURIComponent).join('/')}`;
  const payload = sha(body);
  const canonical = ['PUT', uri, '', `host:${ep.host}`, `x-amz-content-sha256:${payload}`, `x-amz-date:${amzDate}`, '',
    'host;x-amz-content-sha256;x-amz-date', payload].join('\n');
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha(canonical)].join('\n');
  let k = hmac(`AWS4${t.env('D9_S3_SECRET_KEY')}`, day);
  for (const part of [region, 's3', 'aws4_request']) k = hmac(k, part);
  const auth = `AWS4-HMAC-SHA256 Credential=${t.env('D9_S3_ACCESS_KEY')}/${scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=${hmac(k, toSign).toString('hex')}`;
  return new Promise((resolve, reject) => {
    const req = http.request({ host: ep.hostname, port: ep.port, path: uri, method: 'PUT', headers: {
      'x-amz-date': amzDate, 'x-amz-content-sha256': payload, authorization: auth, 'content-length': body.length } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`PUT ${key}: HTTP ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function get(base, rawPath) {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    http.get({ host: u.hostname, port: u.port, path: rawPath, headers: t.authHeaders(base) }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

async function main() {
  const fixture = t.fixturePath();
  const raw = zlib.gunzipSync(fs.readFileSync(fixture));
  const tmp = t.tmpdir('bucket');
  const zst = path.join(tmp, 'seg.zst');
  execFileSync('zstd', ['-q', '-o', zst], { input: raw });
  const k0 = 'team/2026-05-15/1755/metrics/host-a/abcd-4242/1778867710-0.bin.gz';
  const k1 = 'team/2026-05-15/1756/metrics/host-a/abcd-4242/1778867770-1.bin.zst';
  await s3put(k0, fixture);
  await s3put(k1, zst);
  await s3put('private/secret.bin', fixture);
  // A segment as d9d seals it (400,000 events) and a copy smashed in its
  // middle: the listing's span must come from a ranged GET of the head.
  const sealed = execFileSync(process.env.D9_SEALED_SEGMENT, [path.join(tmp, 'svc', '1-2'), '0', 'zstd', '200000'], { encoding: 'utf8' }).trim();
  const smashed = path.join(tmp, 'smashed.zst');
  const sb = Buffer.from(fs.readFileSync(sealed));
  sb.fill(0xff, sb.length >> 1, (sb.length >> 1) + 64);
  fs.writeFileSync(smashed, sb);
  const k2 = 'team/svc/1-2/trace.0.bin.zst', k3 = 'team/svc/1-2/trace.1.bin.zst';
  await s3put(k2, sealed);
  await s3put(k3, smashed);

  t.plan(9);
  process.env.AWS_ACCESS_KEY_ID = t.env('D9_S3_ACCESS_KEY');
  process.env.AWS_SECRET_ACCESS_KEY = t.env('D9_S3_SECRET_KEY');
  process.env.AWS_REGION = process.env.D9_S3_REGION || 'us-east-1';
  const srv = await t.startServe('', ['--bucket', BUCKET, '--prefix', 'team', '--endpoint', t.env('D9_S3_ENDPOINT')]);
  try {
    const list = JSON.parse((await get(srv.url, '/api/list')).body);
    const paths = list.segments.map((s) => s.path).sort();
    t.ok(paths.length === 4 && paths[0] === k0.slice(5) && paths[1] === k1.slice(5) && paths[2] === k2.slice(5) && paths[3] === k3.slice(5),
      'bucket listing shows the prefix\'s segments relative to it', paths.join(' '));
    const s0 = list.segments.find((s) => s.path === k0.slice(5));
    t.ok(s0.layout === 'dial9' && s0.service === 'metrics' && s0.instance === 'host-a' && s0.boot === 'abcd-4242' && s0.index === 0,
      'bucket keys are parsed with dial9\'s layout', JSON.stringify(s0));
    const q = (p) => `seg=${encodeURIComponent(p)}`;
    let r = await get(srv.url, `/api/trace?${q(k0.slice(5))}&${q(k1.slice(5))}`);
    t.ok(r.status === 200 && r.body.equals(Buffer.concat([raw, raw])), 'gzip + zstd objects are served decompressed and concatenated');
    const info = async (k) => { const x = await get(srv.url, `/api/info?${q(k.slice(5))}`); return x.status === 200 ? JSON.parse(x.body) : { status: x.status, body: x.body.toString() }; };
    const [i0, i2, i3] = [await info(k0), await info(k2), await info(k3)];
    const smashedWhole = await get(srv.url, `/api/trace?${q(k3.slice(5))}`);
    t.ok(i2.source === 'header' && i2.events === 400003 && i3.source === 'header' && i3.events === i2.events && i3.duration_ns === i2.duration_ns &&
      i2.start_ns > 0 && smashedWhole.status === 422,
      `a d9d segment's start and duration come from a ranged GET of its head (the smashed copy lists too, ${i3.events} events, serving it whole is ${smashedWhole.status})`,
      JSON.stringify({ i2, i3 }));
    t.ok(i0.source === 'decoded' && i0.events > 200000 && i0.start_ns > 0, `dial9's object (no span event) is decoded for its info (${i0.events} events)`, JSON.stringify(i0));
    r = await get(srv.url, `/api/trace?${q('../private/secret.bin')}`);
    t.ok(r.status === 400, 'a path climbing out of the prefix is refused', r.status);
    r = await get(srv.url, `/api/trace?${q('2026-05-15/nothing.bin')}`);
    t.ok(r.status === 404, 'a missing object is a 404', r.status);

    const { ctx, close } = await t.launchBrowser();
    try {
      const page = await ctx.newPage();
      const o = await t.openViewer(page, `${srv.url}#${q(k0.slice(5))}`);
      t.ok(o.state === 'ready' && await page.evaluate(() => window.d9.events) === 210639, 'the viewer opens a segment from the bucket');
      await page.goto(srv.url);
      await page.waitForSelector('#segments input[type=checkbox]');
      t.ok((await page.$$('#segments input[type=checkbox]')).length === 4, 'the recordings page lists the bucket\'s segments');
      await page.waitForFunction(() => +document.querySelector('#segments')?.dataset.infoFilled === 4, null, { timeout: 30000 });
      await t.shot(page, 'bucket-listing');
    } finally {
      await close();
    }
  } finally {
    srv.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  t.done();
}

main().catch((e) => t.bail(e.stack));
