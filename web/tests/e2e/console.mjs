// The console end to end, in real Chromium against a real gpucloudd with the engine
// (tests/integration/console_test.cpp starts the daemon and runs this).
//
// Environment: GPUCLOUD_URL (http://127.0.0.1:PORT), GPUCLOUD_ADMIN_PASSWORD, GPUCLOUD_SSH_KEY
// (a private key file; KEY.pub beside it), GPUCLOUD_SCREENSHOTS (a folder; none: no pictures),
// GPUCLOUD_TEST_CLOCK=1 when the daemon runs with --test-clock.
// Exit status: 0 passed, 1 failed, 77 skipped (the reason printed).
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createRequire } from 'node:module';
import { api, axe, dictionary, launch, log, login, Skip, until, untranslated } from './lib.mjs';

const base = process.env.GPUCLOUD_URL;
const adminPassword = process.env.GPUCLOUD_ADMIN_PASSWORD;
const keyPath = process.env.GPUCLOUD_SSH_KEY;
const shots = process.env.GPUCLOUD_SCREENSHOTS || '';
const testClock = process.env.GPUCLOUD_TEST_CLOCK === '1';
const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
const suffix = Math.random().toString(36).slice(2, 7);
const user1 = { username: `alice${suffix}`, password: 'password-123' };
const user2 = { username: `bob${suffix}`, password: 'password-456' };
const skipped = [];
let lastPage = null;
const failures = [];
// Chromium aborts requests in flight with net::ERR_NETWORK_CHANGED when the host's interfaces
// change (other tests beside this one make bridges and veths). When that hit the Notebook's
// frame, the Notebook's RequireJS reports the lost module as a page error ("Script error for
// \"custom/custom\"", possibly after the frame is gone): a fault of the run's network, not of
// the console (which has no RequireJS), so such errors are logged instead of counted.
let notebookNetworkChanged = false;
const notebookScriptError = (f) => f.startsWith('page error: Script error for "');

function check(ok, what) {
  if (ok) log('ok  ', what);
  else {
    log('FAIL', what);
    failures.push(what);
  }
}
function skipStep(what, why) {
  log('SKIP', `${what}: ${why}`);
  skipped.push(`${what}: ${why}`);
}

async function shot(page, name, lang) {
  if (!shots) return;
  mkdirSync(shots, { recursive: true });
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.waitForTimeout(150); // let charts and fonts settle before the picture
  await page.screenshot({ path: `${shots}/${name}-${lang}.png` });
}

async function goto(page, path) {
  await page.evaluate((p) => {
    history.pushState(null, '', p);
    dispatchEvent(new PopStateEvent('popstate'));
  }, path);
  await page.waitForLoadState('networkidle').catch(() => {});
  await page.waitForFunction(() => !document.querySelector('[aria-busy="true"]'), null, { timeout: 15000 }).catch(() => {});
}

async function main() {
  if (!base) throw new Skip('GPUCLOUD_URL is not set');
  // The console must be served by gpucloudd, with browser sign-in.
  const index = await fetch(base + '/');
  const html = await index.text();
  if (index.status !== 200 || !html.includes('id="app"'))
    throw new Skip(`gpucloudd does not serve the console at / (status ${index.status}); build web/ and use a daemon with the console`);
  const probe = await api(base, 'GET', '/auth/session');
  if (probe.status === 404 || probe.status === 405) throw new Skip('gpucloudd has no browser sign-in (/api/v1/auth/session)');

  const browser = await launch();
  const ctx1 = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-GB' });
  await ctx1.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  const page = await ctx1.newPage();
  lastPage = page;
  page.on('pageerror', (e) => failures.push(`page error: ${e.message}`));

  // --- sign up -------------------------------------------------------------------------
  await page.goto(base + '/signup');
  await page.getByRole('heading', { name: 'Create your gpucloud account' }).waitFor();
  await shot(page, 'signup', 'en');
  await page.getByLabel('Username').fill(user1.username);
  await page.getByLabel('Password', { exact: true }).fill(user1.password);
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.getByRole('heading', { name: 'GPU market' }).waitFor();
  check(true, 'signed up and landed on the market');
  const cookies = await ctx1.cookies(base);
  const sessionCookie = cookies.find((c) => c.name === 'gpucloud_session');
  check(sessionCookie && sessionCookie.httpOnly && sessionCookie.sameSite === 'Strict', 'the session cookie is HttpOnly and SameSite=Strict');
  await page.locator('.offer').first().waitFor();
  await shot(page, 'market', 'en');

  // --- an SSH key, through the page ----------------------------------------------------
  const pub = readFileSync(keyPath + '.pub', 'utf8').trim();
  await page.getByRole('link', { name: 'SSH keys' }).click();
  await page.getByLabel('Name').fill('laptop');
  await page.getByLabel('Public key').fill(pub);
  await page.getByRole('button', { name: 'Add SSH key' }).click();
  await page.getByRole('row', { name: 'laptop' }).waitFor();
  check(true, 'added an SSH key');
  await shot(page, 'ssh-keys', 'en');

  // --- create from the create page -----------------------------------------------------
  await page.getByRole('link', { name: 'Create instance' }).first().click();
  await page.getByRole('heading', { name: 'Create an instance' }).waitFor();
  const name = `web-${suffix}`;
  await page.getByLabel('Instance name').fill(name);
  await page.getByLabel('GPU model').selectOption({ index: 1 });
  // The base image, which has Jupyter Notebook (issue 24: "the base image gains Debian's Jupyter Notebook").
  const imageSelect = page.getByLabel('Image', { exact: true });
  const imageOptions = await imageSelect.locator('option').evaluateAll((os) => os.map((o) => ({ value: o.value, text: o.textContent.trim() })));
  const baseImage = imageOptions.find((o) => o.text === 'debian-12-base');
  check(!!baseImage, 'the create page offers the base image debian-12-base');
  if (baseImage) await imageSelect.selectOption(baseImage.value);
  await page.getByRole('button', { name: 'Add a new data disk' }).click();
  await page.getByLabel('Size (GiB)').fill('1');
  await page.getByLabel('8888 (Jupyter)').check();
  await page.getByLabel('Other ports').fill('8000');
  await page.getByTestId('est-hour').filter({ hasText: '¥' }).waitFor();
  const estHour = await page.getByTestId('est-hour').textContent();
  check(/^¥\d/.test(estHour), `the estimate shows a price per hour (${estHour})`);
  await shot(page, 'create', 'en');
  // A refusal's detail appears beside the field it names.
  await page.getByLabel('System disk (GiB)').fill('5');
  await page.getByRole('button', { name: 'Create instance' }).click();
  const diskField = page.locator('.field', { has: page.getByLabel('System disk (GiB)') });
  await diskField.getByRole('alert').waitFor();
  check(/system_disk_gib/.test(await diskField.getByRole('alert').innerText()), 'the API\'s problem detail is shown next to the system disk field');
  await page.getByLabel('System disk (GiB)').fill('30');
  await page.getByRole('button', { name: 'Create instance' }).click();
  await page.waitForURL(/\/instances\?created=/);
  const id = new URL(page.url()).searchParams.get('created');
  check(/^i-/.test(id), `created ${id}`);

  // --- the badge turns running without a reload ----------------------------------------
  const navigations = [];
  page.on('framenavigated', (f) => f === page.mainFrame() && navigations.push(f.url()));
  const row = page.getByRole('row', { name });
  await row.locator('[data-state="running"]').waitFor({ timeout: 90000 });
  check(navigations.every((u) => !u.includes('/instances?') || u === page.url()) && navigations.length === 0,
    'the badge turned running with no reload');
  await shot(page, 'instances', 'en');

  // --- the copied SSH command works with OpenSSH ---------------------------------------
  await row.getByRole('button', { name: `Copy the SSH command of ${name}` }).click();
  const sshCommand = (await page.evaluate(() => navigator.clipboard.readText())).trim();
  check(/^ssh -p \d+ root@/.test(sshCommand), `copied "${sshCommand}"`);
  const args = sshCommand.split(/\s+/).slice(1);
  const sshOut = await until('ssh to answer', () => {
    try {
      return execFileSync('ssh', ['-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'BatchMode=yes',
        '-o', 'ConnectTimeout=5', '-i', keyPath, ...args, 'echo ssh-$((6*7)); mount | grep -c /root/data'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch { return ''; }
  }, 30000, 500);
  check(sshOut.includes('ssh-42'), 'the copied SSH command ran a command in the instance');
  check(/^[1-9]/m.test(sshOut.split('\n')[1] ?? ''), 'the new data disk is mounted at /root/data');

  // --- terminal ------------------------------------------------------------------------
  await row.getByRole('link', { name }).click();
  await page.getByRole('tab', { name: 'Overview' }).waitFor();
  await shot(page, 'instance', 'en');
  await page.getByRole('tab', { name: 'Terminal' }).click();
  await page.getByText('Connected').waitFor({ timeout: 20000 });
  await page.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type('echo term-$((6*7))\n');
  await until('the echo in the terminal', async () => (await page.locator('.xterm-rows').innerText()).includes('term-42'), 15000);
  check(true, 'the terminal shows the output of echo');
  // A web server in the instance on the declared port 8000, for the proxy below.
  await page.keyboard.type('mkdir -p /tmp/www && echo hello-proxy > /tmp/www/index.html && (cd /tmp/www && nohup python3 -m http.server 8000 >/dev/null 2>&1 &)\n');
  await shot(page, 'terminal', 'en');

  // --- Jupyter (issue 24's server side: Jupyter in the base image) -----------------------
  const inst = (await page.evaluate(async (i) => (await fetch(`/api/v1/instances/${i}`)).json(), id));
  if (!inst.jupyter_url) check(false, 'an instance of the base image has a jupyter_url');
  else {
    // The console's Jupyter tab embeds the Notebook through the proxy.
    await page.getByRole('tab', { name: 'Jupyter' }).click();
    const frame = page.frameLocator('iframe.jupyter-frame');
    // A row of the file list is drawn by the Notebook's scripts (the list's box is in its HTML):
    // waiting for one lets them all load before the tab is left, which removes the frame and
    // cuts off a script still loading (seen once in CI as "Script error for custom/custom").
    const showsList = () => frame.locator('#notebook_list .list_item').first().waitFor({ timeout: 60000 }).then(() => true, () => false);
    // The Notebook's requests that failed or were refused, logged with any frame error.
    const frameRequests = [];
    const onFrameResponse = (res) => {
      if (res.url().includes('/jupyter/') && res.status() >= 400) frameRequests.push(`${new URL(res.url()).pathname} → ${res.status()}`);
    };
    const onFrameFailed = (req) => {
      if (req.url().includes('/jupyter/')) frameRequests.push(`${new URL(req.url()).pathname} failed: ${req.failure()?.errorText}`);
    };
    page.on('response', onFrameResponse);
    page.on('requestfailed', onFrameFailed);
    const errorsBefore = failures.length;
    let listed = await showsList();
    if (!listed) {
      // Seen once in a loaded CI run: the Notebook's page came but some of its scripts did not
      // (see the requests logged as failed). Open the tab again once, and say so.
      log('jupyter: the tab did not show the Notebook within 60 s; opening it again');
      await page.getByRole('tab', { name: 'Terminal' }).click();
      await page.getByRole('tab', { name: 'Jupyter' }).click();
      listed = await showsList();
      // The first try's script errors came from the Notebook's frame: logged, and they count
      // only when the second try fails too.
      if (listed) {
        const added = failures.splice(errorsBefore);
        failures.push(...added.filter((f) => !f.startsWith('page error:')));
        const frameErrors = added.filter((f) => f.startsWith('page error:'));
        if (frameErrors.length) log(`jupyter: the first try's frame errors: ${frameErrors.join('; ')}`);
      }
    }
    check(listed, 'the Jupyter tab shows the Notebook through the proxy');
    await shot(page, 'jupyter', 'en');
    await page.getByRole('tab', { name: 'Terminal' }).click();
    page.off('response', onFrameResponse);
    page.off('requestfailed', onFrameFailed);
    if (frameRequests.length) log(`jupyter: the frame's requests that failed: ${frameRequests.join('; ')}`);
    if (frameRequests.some((r) => r.includes('ERR_NETWORK_CHANGED'))) notebookNetworkChanged = true;
    const jp = await ctx1.newPage();
    await jp.goto(`${base}/api/v1/instances/${id}/jupyter/`);
    let ok = await runJupyterCell(jp).catch((e) => (log('jupyter:', e.message), false));
    if (!ok) {
      log('jupyter: loading the Notebook again once');
      await jp.goto(`${base}/api/v1/instances/${id}/jupyter/`);
      ok = await runJupyterCell(jp).catch((e) => (log('jupyter (again):', e.message), false));
    }
    check(ok, 'Jupyter ran a cell 6*7 → 42');
    await jp.close();
  }

  // --- a web service through the proxy -------------------------------------------------
  let proxied = { status: 0, text: '' };
  await until('the proxy to reach port 8000', async () => {
    proxied = await page.evaluate(async (i) => {
      const res = await fetch(`/api/v1/instances/${i}/proxy/8000/`);
      return { status: res.status, text: await res.text() };
    }, id);
    // 404: no proxy route (or no such port); 502/503: the server in the instance is not up yet.
    return proxied.status === 404 || (proxied.status === 200 && proxied.text.includes('hello-proxy'));
  }, 20000, 500).catch(() => {});
  if (proxied.status === 200) {
    check(proxied.text.includes('hello-proxy'), 'the web server in the instance answered through the proxy');
    // And from the instance page's "Web services" tab, as a user reaches it.
    await page.getByRole('tab', { name: 'Web services' }).click();
    const [svc] = await Promise.all([ctx1.waitForEvent('page'), page.getByRole('link', { name: 'Service on port 8000' }).click()]);
    await svc.waitForLoadState();
    check((await svc.locator('body').innerText()).includes('hello-proxy'), 'the Web services tab opens the service through the proxy');
    await svc.close();
  }
  else skipStep('web service through the proxy', `GET /api/v1/instances/{id}/proxy/8000/ answered ${proxied.status}: the port proxy is not in this gpucloudd yet`);

  // --- "notify me" on a sold-out model (the server's market watches) ---------------------
  const watchesAnswer = await page.evaluate(async () => (await fetch('/api/v1/market/watches')).status);
  if (watchesAnswer !== 200) skipStep('notify me on a sold-out model', `GET /api/v1/market/watches answered ${watchesAnswer}: no market watches in this gpucloudd yet`);
  else {
    const token = await login(base, user1.username, user1.password);
    const model = inst.gpu_model;
    const free = (await api(base, 'GET', '/market', { token })).json.items.find((o) => o.gpu_model === model && o.zone === inst.zone).gpus_free;
    const fillers = [];
    for (let i = 0; i < free; i++) {
      const r = await api(base, 'POST', '/instances', { token, body: { name: `fill-${suffix}-${i}`, gpu_model: model, gpu_count: 1, zone: inst.zone } });
      check(r.status === 202, `took a free ${model} (${r.status})`);
      fillers.push(r.json?.id);
    }
    await goto(page, '/market');
    const card = page.getByRole('listitem', { name: `${model} · ${inst.zone}` });
    await card.getByText('Sold out').waitFor();
    await card.getByRole('button', { name: 'Notify me' }).click();
    await page.getByText(`We will tell you when a ${model} frees up.`).waitFor();
    check(true, `asked to be notified about ${model}`);
    const since = (await api(base, 'GET', '/events', { token })).json.items.reduce((m, e) => Math.max(m, e.seq), 0);
    for (const f of fillers) await api(base, 'DELETE', `/instances/${f}`, { token });
    const fired = await until('a market.gpu_available event', async () =>
      (await api(base, 'GET', `/events?since_seq=${since}`, { token })).json.items.find((e) => e.type === 'market.gpu_available'), 60000).catch(() => null);
    check(!!fired, `a ${model} freed up and the watch fired (${fired?.message ?? 'no event'})`);
  }

  // --- time passes, then stop (the confirmation names the disk that keeps billing) ------
  if (testClock) {
    const admin = await login(base, 'admin', adminPassword);
    const r = await api(base, 'POST', '/admin/clock', { token: admin, body: { advance_seconds: 3600 } });
    check(r.status === 200, 'advanced the test clock by an hour');
  }
  await goto(page, '/instances');
  await row.getByRole('button', { name: `Stop ${name}` }).click();
  const dialog = page.getByRole('dialog', { name: `Stop ${name}?` });
  await dialog.waitFor();
  const disks = await page.evaluate(async () => (await (await fetch('/api/v1/disks')).json()).items);
  const disk = disks.find((d) => d.instance === id);
  const dialogText = await dialog.innerText();
  check(disk && dialogText.includes(disk.name) && /keep billing/i.test(dialogText), `the stop confirmation names the disk that keeps billing (${disk?.name})`);
  await shot(page, 'stop-dialog', 'en');
  await dialog.getByRole('button', { name: 'Stop' }).click();
  await row.locator('[data-state="stopped"]').waitFor({ timeout: 60000 });
  check(true, 'stopped; the badge says so');

  // --- the charge in the billing center ------------------------------------------------
  await page.getByRole('link', { name: 'Billing center' }).click();
  await page.getByRole('heading', { name: 'Ledger' }).waitFor();
  const ledger = page.locator('table.ledger');
  await ledger.waitFor();
  const charge = await until('a charge in the ledger', async () => {
    const rows = await ledger.locator('tbody tr').allInnerTexts();
    return rows.find((r) => /Charge/.test(r) && /-¥/.test(r) && r.includes(id));
  }, 15000).catch(() => null);
  check(!!charge, `the instance's charge is in the billing center (${charge?.replace(/\s+/g, ' ')})`);
  await shot(page, 'billing', 'en');

  // --- a security group with the all-open rule needs the worded acknowledgement ---------
  await goto(page, '/security-groups');
  await page.getByRole('button', { name: 'New security group' }).click();
  const editor = page.getByRole('form', { name: 'New security group' });
  await editor.getByLabel('Name').fill(`wide-${suffix}`);
  await editor.getByRole('button', { name: 'Add the all-open rule' }).click();
  const save = editor.getByRole('button', { name: 'Save' });
  check(await save.isDisabled(), 'the all-open rule cannot be saved without the acknowledgement');
  await editor.getByLabel('I understand that every port will be reachable by anyone, and I accept the risk.').check();
  await save.click();
  await page.getByRole('article', { name: `wide-${suffix}` }).waitFor();
  check(true, 'saved a group with the all-open rule after acknowledging the risk');

  // --- screenshots of the other pages, English -----------------------------------------
  for (const [path, file] of [['/disks', 'disks'], ['/images', 'images'], ['/security-groups', 'security-groups'], ['/account', 'account']]) {
    await goto(page, path);
    await shot(page, file, 'en');
  }
  // axe over the main pages
  for (const path of ['/market', '/create', '/instances', `/instances/${id}`, '/disks', '/images', '/security-groups', '/ssh-keys', '/billing', '/account']) {
    await goto(page, path);
    const v = await axe(page, axeSource);
    check(v.length === 0, `axe: no serious or critical violations on ${path}${v.length ? '\n    ' + v.join('\n    ') : ''}`);
  }
  // a phone: nothing wider than the screen
  await page.setViewportSize({ width: 390, height: 800 });
  for (const path of ['/market', '/instances', '/create', '/billing']) {
    await goto(page, path);
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    check(w <= 392, `${path} fits 390 px (scrollWidth ${w})`);
  }
  await goto(page, '/instances');
  await shot(page, 'instances-phone', 'en');
  await page.setViewportSize({ width: 1280, height: 800 });

  // --- 中文: nothing left untranslated on the main pages -------------------------------
  await goto(page, '/market');
  await page.getByLabel('Language').first().selectOption('zh');
  await page.getByRole('heading', { name: '算力市场' }).waitFor();
  const dict = dictionary();
  for (const [path, file] of [['/market', 'market'], ['/create', 'create'], ['/instances', 'instances'], [`/instances/${id}`, 'instance'],
    ['/disks', 'disks'], ['/images', 'images'], ['/security-groups', 'security-groups'], ['/ssh-keys', 'ssh-keys'], ['/billing', 'billing'], ['/account', 'account']]) {
    await goto(page, path);
    const text = await page.locator('body').innerText();
    const left = untranslated(text, dict);
    check(left.length === 0, `中文 ${path}: no English string of the console${left.length ? ': ' + left.join('; ') : ''}`);
    const v = await axe(page, axeSource);
    check(v.length === 0, `axe (中文): no serious or critical violations on ${path}${v.length ? '\n    ' + v.join('\n    ') : ''}`);
    await shot(page, file, 'zh');
  }
  await page.reload();
  await page.getByRole('heading', { name: '账号设置' }).waitFor();
  check(true, 'the language is remembered across a reload');
  await page.getByLabel('语言').first().selectOption('en');

  // --- another user gets 404 for the first user's terminal, Jupyter and proxy ----------
  const ctx2 = await browser.newContext();
  check((await ctx2.request.post(`${base}/api/v1/auth/register`, { data: user2 })).status() === 201, 'registered a second user');
  const s2 = await ctx2.request.post(`${base}/api/v1/auth/session`, { data: user2 });
  check(s2.status() === 200, 'the second user signed in');
  for (const p of [`/api/v1/instances/${id}/terminal`, `/api/v1/instances/${id}/jupyter/`, `/api/v1/instances/${id}/proxy/8000/`]) {
    const r = await ctx2.request.get(base + p);
    check(r.status() === 404, `another user's GET ${p} → ${r.status()} (want 404)`);
  }
  await ctx2.close();

  // --- a cross-site POST carrying the cookie is refused --------------------------------
  const cookieHeader = (await ctx1.cookies(base)).map((c) => `${c.name}=${c.value}`).join('; ');
  const forged = await api(base, 'POST', '/ssh-keys', { headers: { Cookie: cookieHeader, Origin: 'https://evil.example' },
    body: { name: 'forged', public_key: pub } });
  check(forged.status === 403, `a cross-site POST with the cookie and no CSRF token → ${forged.status} (want 403)`);
  // And from a real page on another origin of this host (the browser sends the cookie: same site).
  const evil = createServer((req, res) => {
    res.setHeader('Content-Type', 'text/html');
    res.end(`<form id="f" method="POST" action="${base}/api/v1/ssh-keys" enctype="text/plain">
      <input name='{"name":"forged2","public_key":"${pub.replace(/"/g, '')}","x":"' value='"}'></form>
      <script>document.getElementById('f').submit()</script>`);
  });
  await new Promise((r) => evil.listen(0, '127.0.0.1', r));
  const evilPage = await ctx1.newPage();
  const [resp] = await Promise.all([
    evilPage.waitForResponse((r) => r.url().endsWith('/api/v1/ssh-keys') && r.request().method() === 'POST'),
    evilPage.goto(`http://127.0.0.1:${evil.address().port}/`),
  ]);
  check(resp.status() === 403, `a form POST from another origin carrying the cookie → ${resp.status()} (want 403)`);
  await evilPage.close();
  evil.close();
  const keys = await page.evaluate(async () => (await (await fetch('/api/v1/ssh-keys')).json()).items.map((k) => k.name));
  check(!keys.includes('forged') && !keys.includes('forged2'), 'no forged key was added');

  // --- the operator credits the first user from the operator pages ---------------------
  const before = await page.evaluate(async () => (await (await fetch('/api/v1/billing/account')).json()).balance);
  const ctx3 = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const op = await ctx3.newPage();
  op.on('pageerror', (e) => failures.push(`operator page error: ${e.message}`));
  await op.goto(base + '/');
  await shot(op, 'signin', 'en');
  await op.getByLabel('Username').fill('admin');
  await op.getByLabel('Password').fill(adminPassword);
  await op.getByRole('button', { name: 'Sign in' }).click();
  await op.getByRole('link', { name: 'Users' }).click();
  await op.getByRole('button', { name: `Credit ${user1.username}` }).click();
  const credit = op.getByRole('dialog', { name: `Credit ${user1.username}` });
  await credit.getByLabel('Amount (¥)').fill('50');
  await credit.getByLabel('Note').fill('e2e top-up');
  await credit.getByRole('button', { name: 'Credit' }).click();
  await op.getByText(`Credited ${user1.username}.`).waitFor();
  const after = await page.evaluate(async () => (await (await fetch('/api/v1/billing/account')).json()).balance);
  check(after - before === 5000, `the operator's credit reached the user (${before} → ${after} fen)`);
  await shot(op, 'admin-users', 'en');
  for (const [path, file] of [['/admin/hosts', 'admin-hosts'], ['/admin/instances', 'admin-instances'], ['/admin/prices', 'admin-prices'], ['/admin/revenue', 'admin-revenue']]) {
    await goto(op, path);
    const v = await axe(op, axeSource);
    check(v.length === 0, `axe: no serious or critical violations on ${path}${v.length ? '\n    ' + v.join('\n    ') : ''}`);
    await shot(op, file, 'en');
  }
  // Revenue by day: the day of the credit above, in the table and the chart (GET /admin/billing/summary's days).
  await goto(op, '/admin/revenue');
  const revenue = await op.evaluate(async () => (await fetch('/api/v1/admin/billing/summary')).json());
  const creditDay = (revenue.days ?? []).filter((d) => d.received >= 5000).pop();
  check(!!creditDay, `the revenue summary has a day with the operator's credit (${JSON.stringify(revenue.days?.filter((d) => d.received))})`);
  if (creditDay) {
    const yuan = (fen) => `¥${(fen / 100).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
    const row = op.getByRole('table', { name: 'Revenue and usage by day' }).getByRole('row').filter({ has: op.getByRole('rowheader', { name: creditDay.day }) });
    const text = await row.innerText().catch(() => '');
    check(text.includes(yuan(creditDay.received)) && text.includes(yuan(creditDay.charged)),
      `the revenue table's row for ${creditDay.day} shows ${yuan(creditDay.received)} received and ${yuan(creditDay.charged)} charged (${JSON.stringify(text)})`);
    check(await op.getByRole('img', { name: 'Charged per day (¥)' }).isVisible(), 'the revenue page charts the charges per day');
  }
  await op.getByLabel('Language').first().selectOption('zh');
  for (const [path, file] of [['/admin/users', 'admin-users'], ['/admin/hosts', 'admin-hosts'], ['/admin/instances', 'admin-instances'], ['/admin/prices', 'admin-prices'], ['/admin/revenue', 'admin-revenue']]) {
    await goto(op, path);
    const left = untranslated(await op.locator('body').innerText(), dict);
    check(left.length === 0, `中文 ${path}: no English string of the console${left.length ? ': ' + left.join('; ') : ''}`);
    await shot(op, file, 'zh');
  }
  await op.getByRole('button', { name: '退出登录' }).click();
  await op.getByRole('heading', { name: '登录 gpucloud' }).waitFor();
  await shot(op, 'signin', 'zh');
  await op.goto(base + '/signup');
  await shot(op, 'signup', 'zh');
  await ctx3.close();

  // --- a password change ends the session; the new password signs in -------------------
  await goto(page, '/account');
  await page.getByLabel('Current password').fill(user1.password);
  await page.getByLabel('New password').fill('password-789');
  await page.getByLabel('Sign out everywhere and revoke API tokens').check();
  await page.getByRole('button', { name: 'Change password' }).click();
  await page.getByRole('heading', { name: 'Sign in to gpucloud' }).waitFor();
  check(/Every session has ended/.test(await page.getByRole('status').innerText()), 'a password change signs the browser out and says why');
  await page.getByLabel('Username').fill(user1.username);
  await page.getByLabel('Password').fill('password-789');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'GPU market' }).waitFor();
  check(true, 'signed in with the new password');
  await browser.close();
}

// Runs 6*7 in a new notebook of the classic Jupyter Notebook (Debian's 6.4) behind the proxy.
async function runJupyterCell(jp) {
  // Refusals of Jupyter's own requests by the proxy in front of it, for the failure message.
  const refused = [];
  const onResponse = (res) => {
    if (res.url().includes('/jupyter/') && res.status() >= 400)
      refused.push(res.text().catch(() => '').then((t) => `${res.request().method()} ${new URL(res.url()).pathname} → ${res.status()} ${t.slice(0, 160)}`));
  };
  // And requests that got no answer at all (the proxy or the Notebook dropped them).
  const onFailed = (req) => {
    if (req.url().includes('/jupyter/')) refused.push(Promise.resolve(`${req.method()} ${new URL(req.url()).pathname} failed: ${req.failure()?.errorText}`));
  };
  jp.context().on('response', onResponse);
  jp.context().on('requestfailed', onFailed);
  try {
    await jp.waitForLoadState('networkidle');
    await jp.locator('#new-dropdown-button').click();
    // "New → Python 3" opens a blank tab, creates the notebook (POST .../api/contents), then
    // points the tab at it (or closes it when that POST fails).
    const [nb] = await Promise.all([
      jp.context().waitForEvent('page'),
      jp.locator('#kernel-python3 a, [id^="kernel-python"] a').first().click(),
    ]);
    await nb.waitForURL(/\/notebooks\//, { timeout: 20000 });
    return await runCell(nb);
  } catch (e) {
    const why = await Promise.all(refused);
    throw new Error(`${e.message.split('\n')[0]}${why.length ? `; refused: ${why.join('; ')}` : ''}`);
  } finally {
    jp.context().off('response', onResponse);
    jp.context().off('requestfailed', onFailed);
  }
}

async function runCell(nb) {
  await nb.locator('.CodeMirror').first().waitFor({ timeout: 30000 });
  await until('the kernel to be idle', async () => (await nb.locator('#kernel_indicator_icon').getAttribute('class'))?.includes('kernel_idle_icon'), 30000);
  await nb.locator('.CodeMirror').first().click();
  await nb.keyboard.type('6*7');
  await nb.keyboard.press('Shift+Enter');
  await until('the cell output 42', async () => (await nb.locator('.output_subarea').first().innerText()).trim() === '42', 30000);
  await nb.close();
  return true;
}

try {
  await main();
  if (skipped.length) log(`steps skipped:\n  ${skipped.join('\n  ')}`);
  if (notebookNetworkChanged && failures.some(notebookScriptError)) {
    log(`the host's network changed under the Notebook's frame; its script errors, not counted:\n  ${failures.filter(notebookScriptError).join('\n  ')}`);
    failures.splice(0, failures.length, ...failures.filter((f) => !notebookScriptError(f)));
  }
  if (failures.length) {
    log(`${failures.length} check(s) failed:\n  ${failures.join('\n  ')}`);
    process.exit(1);
  }
  log('console e2e passed');
  process.exit(0);
} catch (e) {
  if (e instanceof Skip) {
    log('SKIPPED:', e.message);
    process.exit(77);
  }
  log('FAILED:', e.stack ?? e);
  if (lastPage && shots) await lastPage.screenshot({ path: `${shots}/FAILED.png` }).catch(() => {});
  process.exit(1);
}
