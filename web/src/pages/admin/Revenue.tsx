// Operator: revenue and usage for a month, by kind (GET /admin/billing/summary?month=).
import { useState } from 'preact/hooks';
import { t } from '../../i18n';
import { summary } from '../../api/admin';
import { formatFen } from '../../lib/money';
import { Loading, PageTitle, useLoad } from '../../components/ui';
import { Chart } from '../instances/Chart';

export default function Revenue() {
  const now = new Date();
  const months = Array.from({ length: 12 }, (_, i) => {
    const d = new Date(now.getFullYear(), now.getMonth() - i, 1);
    return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}`;
  });
  const [month, setMonth] = useState(months[0]);
  const data = useLoad(() => summary(month), [month]);
  const s = data.data;
  const kinds = s?.by_kind ? Object.entries(s.by_kind as Record<string, number>) : [];
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
          <table class="table">
            <tbody>{kinds.map(([k, v]) => <tr><th scope="row">{t(`kind.${k}` as any)}</th><td>{formatFen(v)}</td></tr>)}</tbody>
          </table>
          {kinds.length > 0 && <Chart title={t('revenue.by_kind')} x={kinds.map((_, i) => i)} series={[{ label: t('revenue.charged'), values: kinds.map(([, v]) => v / 100) }]} unit=" ¥" bars />}
          <p class="muted small">{t('revenue.by_day_missing')}</p>
        </>
      )}
    </section>
  );
}
