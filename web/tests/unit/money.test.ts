import { describe, expect, it } from 'vitest';
import { formatBytes, formatFen, parseYuan } from '../../src/lib/money';

describe('formatFen', () => {
  it('shows fen as yuan with two decimals', () => {
    expect(formatFen(1234)).toBe('¥12.34');
    expect(formatFen(0)).toBe('¥0.00');
    expect(formatFen(5)).toBe('¥0.05');
    expect(formatFen(100)).toBe('¥1.00');
  });
  it('groups thousands and signs negatives', () => {
    expect(formatFen(123456789)).toBe('¥1,234,567.89');
    expect(formatFen(-250)).toBe('-¥2.50');
    expect(formatFen(-5)).toBe('-¥0.05');
  });
  it('shows a dash for missing amounts', () => {
    expect(formatFen(null)).toBe('—');
    expect(formatFen(undefined)).toBe('—');
    expect(formatFen(Number.NaN)).toBe('—');
  });
});

describe('parseYuan', () => {
  it('reads what people type into fen', () => {
    expect(parseYuan('12')).toBe(1200);
    expect(parseYuan('12.3')).toBe(1230);
    expect(parseYuan('12.34')).toBe(1234);
    expect(parseYuan('¥1,234.56')).toBe(123456);
    expect(parseYuan('-0.05')).toBe(-5);
    expect(parseYuan(' 7 ')).toBe(700);
  });
  it('refuses what is not an amount', () => {
    expect(parseYuan('')).toBeNull();
    expect(parseYuan('abc')).toBeNull();
    expect(parseYuan('1.234')).toBeNull();
    expect(parseYuan('1e3')).toBeNull();
  });
  it('round-trips with formatFen', () => {
    for (const fen of [0, 1, 99, 100, 12345, -777]) expect(parseYuan(formatFen(fen))).toBe(fen);
  });
});

describe('formatBytes', () => {
  it('picks a binary unit', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(10 * 1024 ** 3)).toBe('10 GiB');
  });
});
