import { describe, expect, it } from 'vitest';
import { formatHours, groupOf, revenueChart, revenueRows, type RevenueDay } from '../../src/lib/revenue';

const day = (d: string, by_kind: Record<string, number> = {}, usage: Record<string, number> = {}, received = 0): RevenueDay => ({
  day: d,
  charged: Object.values(by_kind).reduce((s, v) => s + v, 0),
  by_kind,
  usage,
  refunds: 0,
  received,
  adjustments: 0,
});

describe('revenue by day', () => {
  const days = [
    day('2027-02-01', { compute: 480, compute_no_gpu: 20, data_disk: 30 }, { compute: 7200, compute_no_gpu: 1800, data_disk: 10 }, 10000),
    day('2027-02-02', { subscription: 5000, snapshot: 5 }, { snapshot: 2.5 }),
    day('2027-02-03'),
  ];
  it('groups kinds into compute, storage and subscriptions', () => {
    expect(groupOf('compute_no_gpu')).toBe('compute');
    expect(groupOf('image')).toBe('storage');
    expect(groupOf('subscription')).toBe('subscription');
    expect(groupOf('charge')).toBeNull();
  });
  it('makes one row per day with amounts and usage by group', () => {
    const rows = revenueRows(days);
    expect(rows).toHaveLength(3);
    expect(rows[0]).toEqual({
      day: '2027-02-01', charged: 530, compute: 500, storage: 30, subscription: 0, received: 10000,
      instanceHours: 2.5, storageGibHours: 10,
    });
    expect(rows[1].subscription).toBe(5000);
    expect(rows[1].storageGibHours).toBe(2.5);
    expect(rows[2].charged).toBe(0);
  });
  it('leaves out the days after the last one asked for, unless they have entries', () => {
    expect(revenueRows(days, '2027-02-02').map((r) => r.day)).toEqual(['2027-02-01', '2027-02-02']);
    // The server's day ahead of the browser's: its entries still show.
    expect(revenueRows(days, '2027-01-31').map((r) => r.day)).toEqual(['2027-02-01', '2027-02-02']);
  });
  it('charts each group that has a charge, in yuan, at each day\'s noon', () => {
    const c = revenueChart(revenueRows(days));
    expect(c.x).toEqual([Date.parse('2027-02-01T12:00:00Z') / 1000, Date.parse('2027-02-02T12:00:00Z') / 1000, Date.parse('2027-02-03T12:00:00Z') / 1000]);
    expect(c.series.map((s) => s.group)).toEqual(['compute', 'storage', 'subscription']);
    expect(c.series[0].values).toEqual([5, 0, 0]);
    expect(c.series[2].values).toEqual([0, 50, 0]);
    expect(revenueChart(revenueRows([day('2027-02-01')])).series).toEqual([]);
  });
  it('formats hours', () => {
    expect(formatHours(2.54)).toBe('2.5');
    expect(formatHours(0)).toBe('0.0');
    expect(formatHours(1234.4)).toBe('1234');
  });
});
