// The console's numbers (issue 24, docs/benchmarks.md "Web console"):
//   1. JS + CSS of the first page, gzip (from web/dist/index.html and the .gz files beside it);
//   2. navigation start -> market cards on screen with live data, median of 10 in Chromium,
//      against a real gpucloudd on loopback (GPUCLOUD_URL; skipped without one);
//   3. the instance list with 1,000 instances (shown 50 to a page, with a filter): data arrived
//      -> its first page on screen, and an instance state event reflected in its row after the
//      server sent it. Creating 1,000 real
//      instances is too slow for a bench run, so a fixture server (below) serves web/dist, the
//      session, 1,000 instances and the event stream; the page is the real console;
//   4. terminal keystroke echo through the console's WebSocket beside ssh to the same instance
//      (GPUCLOUD_URL with the engine; needs GPUCLOUD_ADMIN_PASSWORD for nothing but creating a
//      user; skipped without a daemon).
// Run: node bench/console/bench.mjs  (after cd web && npm ci && npm run build)
import { spawn, execFileSync } from 'node:child_process';
import { readFileSync, existsSync, statSync, mkdtempSync, rmSync } from 'node:fs';
import { startFixture } from './fixture.mjs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { tmpdir } from 'node:os';

const root = new URL('../../', import.meta.url).pathname;
const web = join(root, 'web');
const dist = join(web, 'dist');
const require = createRequire(join(web, 'package.json'));
const { chromium } = require('playwright-core');
const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const ms = (x) => `${x.toFixed(1)} ms`;
const results = {};

// --- 1. first-page size ------------------------------------------------------------------
{
  const html = readFileSync(join(dist, 'index.html'), 'utf8');
  const refs = [...html.matchAll(/(?:src|href)="\/(assets\/[^"]+\.(?:js|css))"/g)].map((m) => m[1]);
  let raw = 0, gz = 0;
  for (const r of refs) {
    raw += statSync(join(dist, r)).size;
    gz += statSync(join(dist, r + '.gz')).size;
  }
  results.first_page = { files: refs, raw_bytes: raw, gzip_bytes: gz };
  console.log(`first page: ${refs.length} files, ${(raw / 1024).toFixed(1)} KiB, gzip ${(gz / 1024).toFixed(1)} KiB (limit 200 KB)`);
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium', headless: true, args: FLAGS });

// --- 2. market on screen, real daemon ----------------------------------------------------
const base = process.env.GPUCLOUD_URL;
if (!base) console.log('market: skipped (set GPUCLOUD_URL to a gpucloudd serving the console)');
else {
  const username = `bench${Date.now().toString(36)}`;
  const password = 'password-123';
  await fetch(`${base}/api/v1/auth/register`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username, password }) });
  const times = { cold: [], warm: [] };
  for (const mode of ['cold', 'warm']) {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const r = await ctx.request.post(`${base}/api/v1/auth/session`, { data: { username, password } });
    if (r.status() !== 200) throw new Error(`sign-in: ${r.status()}`);
    if (mode === 'warm') { const p = await ctx.newPage(); await p.goto(`${base}/market`); await p.waitForFunction(() => performance.getEntriesByName('gpucloud:market-rendered').length > 0); await p.close(); }
    for (let i = 0; i < 10; i++) {
      const page = mode === 'cold' ? await (await browser.newContext()).newPage() : await ctx.newPage();
      if (mode === 'cold') await page.context().addCookies(await ctx.cookies());
      await page.goto(`${base}/market`);
      await page.waitForFunction(() => performance.getEntriesByName('gpucloud:market-rendered').length > 0, null, { timeout: 10000 });
      times[mode].push(await page.evaluate(() => performance.getEntriesByName('gpucloud:market-rendered')[0].startTime));
      if (mode === 'cold') await page.context().close(); else await page.close();
    }
    await ctx.close();
  }
  results.market = { cold_ms: times.cold, warm_ms: times.warm, cold_median_ms: median(times.cold), warm_median_ms: median(times.warm) };
  console.log(`market cards on screen (navigation start ->), median of 10: cold cache ${ms(median(times.cold))}, warm ${ms(median(times.warm))} (limit 500 ms)`);
}

// --- 3. 1,000 instances from a fixture server ------------------------------------------
{
  const N = 1000;
  const fx = await startFixture(N);
  const { instances, streams } = fx;
  const fixture = fx.url;
  const render = [], fromNav = [], events = [];
  for (let run = 0; run < 5; run++) {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.goto(`${fixture}/instances`);
    await page.waitForFunction(() => performance.getEntriesByName('gpucloud:instances-rendered').length > 0, null, { timeout: 20000 });
    const [d, r] = await page.evaluate(() => ['gpucloud:instances-data', 'gpucloud:instances-rendered'].map((n) => performance.getEntriesByName(n)[0].startTime));
    const rows = await page.locator('tbody tr').count();
    const total = await page.locator('.pager .muted').innerText();
    if (rows !== 50 || !total.includes(String(N))) throw new Error(`rendered ${rows} rows (${total}), want the first 50 of ${N}`);
    render.push(r - d);
    fromNav.push(r);
    await until(() => streams.size > 0);
    // State events: the server writes one, the page notes when the row's badge shows it.
    for (let k = 0; k < 10; k++) {
      const inst = instances[(run * 7 + k * 5) % 50]; // on the page shown
      const next = inst.state === 'running' ? 'stopped' : 'running';
      await page.evaluate(([id, state]) => {
        const badge = () => document.querySelector(`tr[data-id="${id}"] [data-state]`);
        window.__seen = new Promise((resolve) => {
          const o = new MutationObserver(() => { if (badge()?.getAttribute('data-state') === state) { o.disconnect(); resolve(performance.timeOrigin + performance.now()); } });
          o.observe(document.querySelector('tbody'), { subtree: true, attributes: true, childList: true, characterData: true });
        });
      }, [inst.id, next]);
      const sent = fx.send(inst, next);
      const seen = await page.evaluate(() => window.__seen);
      events.push(seen - sent);
    }
    await page.close();
  }
  fx.close();
  results.instances_1000 = { render_ms: render, render_median_ms: median(render), nav_to_rendered_median_ms: median(fromNav), event_ms: events, event_p50_ms: median(events), event_max_ms: Math.max(...events) };
  console.log(`1,000 instances (the list's first page of 50): data -> rows on screen median ${ms(median(render))} (5 loads; navigation start -> rows ${ms(median(fromNav))}) (limit 200 ms)`);
  console.log(`state event -> its row: p50 ${ms(median(events))}, p90 ${ms(pct(events, 0.9))}, max ${ms(Math.max(...events))} over ${events.length} (limit 100 ms)`);
}

// --- 4. terminal echo beside ssh, real daemon with the engine ----------------------------
if (base && process.env.GPUCLOUD_BENCH_TERMINAL !== '0') {
  const username = `term${Date.now().toString(36)}`;
  const password = 'password-123';
  const dir = mkdtempSync(join(tmpdir(), 'console-bench-'));
  try {
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'id')]);
    const ctx = await browser.newContext();
    await ctx.request.post(`${base}/api/v1/auth/register`, { data: { username, password } });
    const s = await (await ctx.request.post(`${base}/api/v1/auth/session`, { data: { username, password } })).json();
    const h = { 'X-CSRF-Token': s.csrf_token };
    await ctx.request.post(`${base}/api/v1/ssh-keys`, { headers: h, data: { name: 'bench', public_key: readFileSync(join(dir, 'id.pub'), 'utf8').trim() } });
    const created = await (await ctx.request.post(`${base}/api/v1/instances`, { headers: h, data: { name: 'echo', gpu_count: 0, ssh_keys: ['bench'] } })).json();
    const id = created.id;
    let inst;
    await until(async () => (inst = await (await ctx.request.get(`${base}/api/v1/instances/${id}`)).json()).state === 'running', 60000);
    const page = await ctx.newPage();
    await page.goto(`${base}/market`);
    const wsTimes = await page.evaluate(async (id) => {
      const ws = new WebSocket(`ws://${location.host}/api/v1/instances/${id}/terminal`);
      ws.binaryType = 'arraybuffer';
      let buf = '';
      let waiter = null;
      ws.onmessage = (m) => { buf += new TextDecoder().decode(m.data instanceof ArrayBuffer ? new Uint8Array(m.data) : new TextEncoder().encode(m.data)); waiter?.(); };
      await new Promise((r) => (ws.onopen = r));
      const wait = (pred) => new Promise((r) => { waiter = () => pred() && r(); waiter(); });
      ws.send(new TextEncoder().encode('stty -echoctl; PS1="$ "; clear\n'));
      await new Promise((r) => setTimeout(r, 500));
      const out = [];
      for (let i = 0; i < 60; i++) {
        const ch = 'abcdefghijklmnopqrstuvwxyz'[i % 26];
        buf = '';
        const t0 = performance.now();
        ws.send(new TextEncoder().encode(ch));
        await wait(() => buf.includes(ch));
        out.push(performance.now() - t0);
        if (i % 20 === 19) { ws.send(new TextEncoder().encode('\x15')); await new Promise((r) => setTimeout(r, 50)); }
      }
      ws.close();
      return out;
    }, id);
    const sshTimes = await sshEcho(inst, join(dir, 'id'));
    results.terminal = { console_ws_p50_ms: median(wsTimes.slice(5)), ssh_p50_ms: median(sshTimes.slice(5)), console_ws_ms: wsTimes, ssh_ms: sshTimes };
    console.log(`keystroke echo p50: console terminal (WebSocket) ${ms(median(wsTimes.slice(5)))}, ssh ${ms(median(sshTimes.slice(5)))} (55 keys each after 5 warm-up)`);
    await ctx.request.delete(`${base}/api/v1/instances/${id}`, { headers: h });
    await ctx.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await browser.close();
console.log(JSON.stringify(results, (k, v) => (Array.isArray(v) && typeof v[0] === 'number' ? v.map((x) => Math.round(x * 10) / 10) : v)));

async function until(check, ms = 10000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) { if (await check()) return; await new Promise((r) => setTimeout(r, 50)); }
  throw new Error('timed out');
}

// ssh -tt to the instance: write one key, time until it is echoed.
async function sshEcho(inst, key) {
  const p = spawn('ssh', ['-tt', '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR', '-i', key,
    '-p', String(inst.ssh.port), `root@${inst.ssh.host}`], { stdio: ['pipe', 'pipe', 'inherit'] });
  let buf = '';
  let waiter = null;
  p.stdout.on('data', (d) => { buf += d.toString(); waiter?.(); });
  const wait = (pred, t = 10000) => new Promise((r, j) => { const to = setTimeout(() => j(new Error('ssh echo timed out')), t); waiter = () => { if (pred()) { clearTimeout(to); r(); } }; waiter(); });
  p.stdin.write('stty -echoctl; PS1="$ "; echo ready-$((6*7))\n');
  await wait(() => buf.includes('ready-42'));
  await new Promise((r) => setTimeout(r, 300));
  const out = [];
  for (let i = 0; i < 60; i++) {
    const ch = 'abcdefghijklmnopqrstuvwxyz'[i % 26];
    buf = '';
    const t0 = performance.now();
    p.stdin.write(ch);
    await wait(() => buf.includes(ch));
    out.push(performance.now() - t0);
    if (i % 20 === 19) { p.stdin.write('\x15'); await new Promise((r) => setTimeout(r, 50)); }
  }
  p.stdin.write('\nexit\n');
  p.kill();
  return out;
}
