// Helpers for the end-to-end runs: Chromium through playwright-core, the API with a bearer
// token for the test's own set-up (the console itself only ever uses the cookie), and the
// dictionary of strings (to find English left on a Chinese page).
import { readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
export const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];

export async function launch() {
  // playwright-core starts Chromium headless with a fresh temporary --user-data-dir of its own.
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
}

export class Skip extends Error {}

export function log(...args) {
  const t = ((performance.now()) / 1000).toFixed(1).padStart(6);
  console.log(`[${t}s]`, ...args);
}

export async function api(base, method, path, { token, body, headers = {} } = {}) {
  const h = { ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const res = await fetch(base + '/api/v1' + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  return { status: res.status, json, text, headers: res.headers };
}

export async function login(base, username, password) {
  const r = await api(base, 'POST', '/auth/login', { body: { username, password } });
  if (r.status !== 200) throw new Error(`login ${username}: ${r.status} ${r.text}`);
  return r.json.token;
}

// Waits for `check()` to return something truthy, polling every `every` ms until `ms` pass.
export async function until(what, check, ms = 30000, every = 200) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await check();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, every));
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

// [[key, en, zh], ...] read from src/i18n/strings.ts.
export function dictionary() {
  const text = readFileSync(new URL('../../src/i18n/strings.ts', import.meta.url), 'utf8');
  const out = [];
  for (const m of text.matchAll(/^\s*'([^']+)':\s*\['((?:[^'\\]|\\.)*)',\s*'((?:[^'\\]|\\.)*)'\]/gm)) out.push([m[1], m[2], m[3]]);
  return out;
}

// English strings of the dictionary found in `text` (a page shown in Chinese). Only strings
// that differ in Chinese and read as words (two or more letters-words) count; placeholders
// split a string into its fixed parts.
export function untranslated(text, dict) {
  const found = new Set();
  for (const [key, en, zh] of dict) {
    if (en === zh) continue;
    for (const part of en.split(/\{\w+\}/)) {
      const p = part.trim().replace(/^[\s.,:;()·—-]+|[\s.,:;()·—-]+$/g, '');
      if (p.length < 4 || !/[A-Za-z]{3,}.*\s.*[A-Za-z]{2,}|[A-Za-z]{5,}/.test(p)) continue;
      if (/^(GPU|CPU|SSH|CUDA|Python|Jupyter|TensorBoard|Gradio|OpenSSH|CIDR|Webhook|API)\b/.test(p) && !/\s/.test(p)) continue;
      if (zh.includes(p)) continue;
      const re = new RegExp(`(^|[^A-Za-z])${p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}($|[^A-Za-z])`);
      if (re.test(text)) found.add(`${key}: "${p}"`);
    }
  }
  return [...found];
}

export async function axe(page, axeSource) {
  // evaluate, not a <script> tag: the console's Content-Security-Policy refuses inline scripts.
  await page.evaluate(axeSource);
  return page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'best-practice'] } });
    return r.violations
      .filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')})`);
  });
}
