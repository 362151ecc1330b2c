// Operator: revenue and usage for a month, by kind and by day (GET /admin/billing/summary?month=:
// its `days`, in billing_timezone).
import { useMemo, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { summary } from '../../api/admin';
import { formatFen } from '../../lib/money';
import { formatHours, revenueChart, revenueRows, type RevenueSummary } from '../../lib/revenue';
import { Empty, Loading, PageTitle, useLoad } from '../../components/ui';
import { Chart } from '../instances/Chart';

const GROUP_LABEL = { compute: 'revenue.compute', storage: 'revenue.storage', subscription: 'kind.subscription' } as const;

function localToday(): string {
  const d = new Date();
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}

export default function Revenue() {
  const now = new Date();
  const months = Array.from({ length: 12 }, (_, i) => {
    const d = new Date(now.getFullYear(), now.getMonth() - i, 1);
    return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}`;
  });
  const [month, setMonth] = useState(months[0]);
  const data = useLoad(() => summary(month) as Promise<RevenueSummary>, [month]);
  const s = data.data;
  const kinds = s?.by_kind ? Object.entries(s.by_kind) : [];
  const rows = useMemo(() => revenueRows(s?.days ?? [], localToday()), [s]);
  const chart = useMemo(() => {
    const c = revenueChart(rows);
    return { x: c.x, series: c.series.map((g) => ({ label: t(GROUP_LABEL[g.group]), values: g.values })) };
  }, [rows]);
  return (
    <section>
      <PageTitle actions={
        <label class="inline">{t('billing.month')}
          <select value={month} onChange={(e) => setMonth((e.target as HTMLSelectElement).value)}>{months.map((m) => <option value={m}>{m}</option>)}</select>
        </label>
      }>{t('revenue.title')}</PageTitle>
      {!s ? <Loading error={data.error} /> : (
        <>
          <dl class="facts card">
            <dt>{t('revenue.revenue')}</dt><dd>{formatFen(s.revenue)}</dd>
            <dt>{t('revenue.charged')}</dt><dd>{formatFen(s.charged)}</dd>
            <dt>{t('revenue.received')}</dt><dd>{formatFen(s.received)}</dd>
            <dt>{t('revenue.refunds')}</dt><dd>{formatFen(s.refunds)}</dd>
            <dt>{t('revenue.adjustments')}</dt><dd>{formatFen(s.adjustments)}</dd>
            <dt>{t('revenue.arrears')}</dt><dd>{formatFen(s.arrears)}</dd>
          </dl>
          <h2>{t('revenue.by_kind')}</h2>
          <table class="table" aria-label={t('revenue.by_kind')}>
            <tbody>{kinds.map(([k, v]) => <tr><th scope="row">{t(`kind.${k}` as any)}</th><td>{formatFen(v)}</td></tr>)}</tbody>
          </table>
          <section aria-labelledby="revenue-days-h">
            <h2 id="revenue-days-h">{t('revenue.by_day')}</h2>
            <p class="muted small">{t('revenue.days_in_zone', { zone: s.timezone })}</p>
            {rows.length === 0 ? <Empty text={t('revenue.no_days')} /> : (
              <>
                {chart.series.length > 0 && <Chart title={t('revenue.by_day_chart')} x={chart.x} series={chart.series} unit=" ¥" bars days />}
                                  <table class="table" data-testid="revenue-days" aria-label={t('revenue.by_day')}>
                    <thead>
                      <tr>
                        <th scope="col">{t('revenue.day')}</th>
                        <th scope="col">{t('revenue.charged')}</th>
                        <th scope="col">{t('revenue.compute')}</th>
                        <th scope="col">{t('revenue.storage')}</th>
                        <th scope="col">{t('kind.subscription')}</th>
                        <th scope="col">{t('revenue.received')}</th>
                        <th scope="col">{t('revenue.instance_hours')}</th>
                        <th scope="col">{t('revenue.storage_gib_hours')}</th>
                      </tr>
                    </thead>
                    <tbody>
                      {rows.map((r) => (
                        <tr>
                          <th scope="row">{r.day}</th>
                          <td data-label={t('revenue.charged')}>{formatFen(r.charged)}</td>
                          <td data-label={t('revenue.compute')}>{formatFen(r.compute)}</td>
                          <td data-label={t('revenue.storage')}>{formatFen(r.storage)}</td>
                          <td data-label={t('kind.subscription')}>{formatFen(r.subscription)}</td>
                          <td data-label={t('revenue.received')}>{formatFen(r.received)}</td>
                          <td data-label={t('revenue.instance_hours')}>{formatHours(r.instanceHours)}</td>
                          <td data-label={t('revenue.storage_gib_hours')}>{formatHours(r.storageGibHours)}</td>
                        </tr>
                      ))}
                    </tbody>
                  </table>
              </>
            )}
          </section>
        </>
      )}
    </section>
  );
}
