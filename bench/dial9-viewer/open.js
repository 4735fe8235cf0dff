// Opens each segment in dial9's viewer.html?trace=... and times it until
// the viewer is shown (or an alert reports an error, or 120 s pass).
'use strict';
const path = require('path');
const pw = require(path.join(__dirname, '..', '..', 'tests', 'viewer', 'node_modules', 'playwright-core'));

async function main() {
  const [base, ...segs] = process.argv.slice(2);
  const browser = await pw.chromium.launch({ executablePath: '/usr/bin/chromium', headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu'] });
  console.log('events      MB   seconds  segment');
  for (const s of segs) {
    const [file, events, name] = s.split(':');
    const page = await browser.newPage({ viewport: { width: 1500, height: 950 } });
    let alerted = '';
    page.on('dialog', async (d) => { alerted = d.message(); await d.dismiss(); });
    const t0 = Date.now();
    await page.goto(`${base}/viewer.html?trace=segments/${file}`);
    let result;
    try {
      await page.waitForFunction(() => document.getElementById('viewer')?.style.display === 'flex', null,
        { timeout: 120000, polling: 100 });
      result = ((Date.now() - t0) / 1000).toFixed(1);
    } catch (e) {
      result = alerted ? `error: ${alerted}` : '>120';
    }
    const bytes = require('fs').statSync(path.join(process.env.D9_SEGMENTS_DIR, file)).size;
    console.log(`${String(events).padStart(8)} ${(bytes / 1e6).toFixed(1).padStart(7)} ${String(result).padStart(9)}  ${name}`);
    await page.close().catch(() => {});
  }
  await browser.close();
}
main().catch((e) => { console.error(e); process.exit(1); });
