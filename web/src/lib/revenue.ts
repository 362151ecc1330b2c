// The operator's revenue by day (GET /admin/billing/summary → days): the chart's series and
// the table's rows, pure so that tests/unit/revenue.test.ts checks them.

export interface RevenueDay {
  day: string; // YYYY-MM-DD in billing_timezone
  charged: number; // fen, net of refunds, subscriptions included
  by_kind: Record<string, number>;
  usage: Record<string, number>; // seconds of compute, GiB-hours of storage
  refunds: number;
  received: number;
  adjustments: number;
}

export interface RevenueSummary {
  month: string;
  timezone: string;
  currency: string;
  revenue: number;
  charged: number;
  by_kind: Record<string, number>;
  refunds: number;
  received: number;
  adjustments: number;
  arrears: number;
  arrears_change: number;
  days?: RevenueDay[];
}

export const COMPUTE_KINDS = ['compute', 'compute_no_gpu'];
export const STORAGE_KINDS = ['system_disk', 'data_disk', 'snapshot', 'image'];
// The chart's groups, in the order they are drawn.
export const REVENUE_GROUPS = ['compute', 'storage', 'subscription'] as const;
export type RevenueGroup = (typeof REVENUE_GROUPS)[number];

export function groupOf(kind: string): RevenueGroup | null {
  if (COMPUTE_KINDS.includes(kind)) return 'compute';
  if (STORAGE_KINDS.includes(kind)) return 'storage';
  if (kind === 'subscription') return 'subscription';
  return null;
}

export interface RevenueRow {
  day: string;
  charged: number;
  compute: number;
  storage: number;
  subscription: number;
  received: number;
  instanceHours: number;
  storageGibHours: number;
}

const sum = (o: Record<string, number> | undefined, keys: string[]) => keys.reduce((s, k) => s + (o?.[k] ?? 0), 0);

const active = (d: RevenueDay) =>
  d.charged !== 0 || d.received !== 0 || d.refunds !== 0 || d.adjustments !== 0 || Object.keys(d.usage ?? {}).length > 0;

// One row per day up to `lastDay` (inclusive: later days of the month have not happened yet)
// or the last day with any entry, whichever is later (the server's day, in billing_timezone,
// may be ahead of the browser's).
export function revenueRows(days: RevenueDay[], lastDay?: string): RevenueRow[] {
  const lastActive = days.filter(active).map((d) => d.day).pop();
  const until = lastDay && lastActive && lastActive > lastDay ? lastActive : lastDay;
  return days
    .filter((d) => !until || d.day <= until)
    .map((d) => ({
      day: d.day,
      charged: d.charged,
      compute: sum(d.by_kind, COMPUTE_KINDS),
      storage: sum(d.by_kind, STORAGE_KINDS),
      subscription: d.by_kind?.subscription ?? 0,
      received: d.received,
      instanceHours: sum(d.usage, COMPUTE_KINDS) / 3600,
      storageGibHours: sum(d.usage, STORAGE_KINDS),
    }));
}

// x: each day's noon UTC in seconds (uPlot's time axis); one series per group that has any
// charge, in yuan.
export function revenueChart(rows: RevenueRow[]): { x: number[]; series: { group: RevenueGroup; values: number[] }[] } {
  const x = rows.map((r) => Date.parse(r.day + 'T12:00:00Z') / 1000);
  const series = REVENUE_GROUPS.filter((g) => rows.some((r) => r[g] !== 0)).map((g) => ({
    group: g,
    values: rows.map((r) => r[g] / 100),
  }));
  return { x, series };
}

// "12.5" style: one decimal under 100, whole numbers above.
export function formatHours(h: number): string {
  if (!Number.isFinite(h)) return '—';
  return Math.abs(h) >= 100 ? String(Math.round(h)) : (Math.round(h * 10) / 10).toFixed(1);
}
