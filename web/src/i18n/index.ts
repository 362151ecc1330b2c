// English and Simplified Chinese. Every key has both (tests/unit/i18n.test.ts); the choice is
// remembered in localStorage and applied to <html lang>.
import { signal } from '@preact/signals';
import { strings, type Key } from './strings';

export type Lang = 'en' | 'zh';
const STORAGE_KEY = 'gpucloud_lang';

function initial(): Lang {
  try {
    const saved = globalThis.localStorage?.getItem(STORAGE_KEY);
    if (saved === 'en' || saved === 'zh') return saved;
    if (globalThis.navigator?.language?.toLowerCase().startsWith('zh')) return 'zh';
  } catch {
    /* no storage (tests) */
  }
  return 'en';
}

export const lang = signal<Lang>(initial());

export function setLang(next: Lang) {
  lang.value = next;
  try {
    localStorage.setItem(STORAGE_KEY, next);
  } catch {
    /* ignore */
  }
  if (globalThis.document) document.documentElement.lang = next === 'zh' ? 'zh-CN' : 'en';
}

export function translate(which: Lang, key: Key, params?: Record<string, string | number>): string {
  const entry = strings[key];
  let s = entry ? entry[which === 'zh' ? 1 : 0] : key;
  if (params) for (const [k, v] of Object.entries(params)) s = s.split(`{${k}}`).join(String(v));
  return s;
}

export function t(key: Key, params?: Record<string, string | number>): string {
  return translate(lang.value, key, params);
}

export type { Key };
