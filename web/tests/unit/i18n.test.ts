import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { strings } from '../../src/i18n/strings';
import { translate } from '../../src/i18n';

const placeholders = (s: string) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();

describe('i18n', () => {
  it('has every key in both languages, none empty', () => {
    for (const [key, pair] of Object.entries(strings)) {
      expect(pair, key).toHaveLength(2);
      expect(pair[0].trim(), `${key} (en)`).not.toBe('');
      expect(pair[1].trim(), `${key} (zh)`).not.toBe('');
    }
  });
  it('keeps the same placeholders in both languages', () => {
    for (const [key, [en, zh]] of Object.entries(strings)) expect(placeholders(zh), key).toEqual(placeholders(en));
  });
  it('translates into Chinese (not English left in place) where words are shown', () => {
    // Product names and units may stay as they are.
    const same = Object.entries(strings).filter(([, [en, zh]]) => en === zh).map(([k]) => k);
    expect(same.every((k) => /^(instances\.gpu|detail\.tab_jupyter|images\.(python|cuda))$/.test(k)), same.join(', ')).toBe(true);
    for (const [key, [, zh]] of Object.entries(strings)) {
      if (!same.includes(key) && !/^create\.port_/.test(key)) expect(/[\u4e00-\u9fff]/.test(zh), key).toBe(true);
    }
  });
  it('fills placeholders', () => {
    expect(translate('en', 'create.free_n', { n: 3 })).toBe('3 free');
    expect(translate('zh', 'create.free_n', { n: 3 })).toBe('空闲 3');
  });
  it('has a string for every literal key the source uses', () => {
    const keys = new Set(Object.keys(strings));
    const missing: string[] = [];
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) walk(p);
        else if (/\.tsx?$/.test(name)) {
          const text = readFileSync(p, 'utf8');
          for (const m of text.matchAll(/\bt\('([a-z_]+\.[a-z0-9_.]+)'/g)) if (!keys.has(m[1])) missing.push(`${name}: ${m[1]}`);
        }
      }
    };
    walk(new URL('../../src', import.meta.url).pathname);
    expect(missing).toEqual([]);
  });
});
