// The billing center: balance, the alert, what bills while unused (with a clean-up per item),
// subscriptions, usage by day and kind (chart), the ledger with filters, monthly statements.
import { useMemo, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { account, clearAlert, idle, ledger, setAlert, statement, subscriptions, usage } from '../../api/billing';
import { releaseInstance, updateInstance } from '../../api/instances';
import { deleteDisk } from '../../api/disks';
import { deleteSnapshot } from '../../api/snapshots';
import { deleteImage } from '../../api/images';
import type { IdleItem } from '../../api/types';
import { formatFen, parseYuan } from '../../lib/money';
import { formatTime } from '../../lib/time';
import { Dialog, Empty, errorText, Field, idleWhy, Loading, PageTitle, useLoad } from '../../components/ui';
import { Chart } from '../instances/Chart';

const KINDS = ['compute', 'compute_no_gpu', 'system_disk', 'data_disk', 'snapshot', 'image'] as const;
const LEDGER_KINDS = ['charge', 'credit', 'subscription', 'refund', 'adjustment'] as const;

function monthOf(d: Date) {
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}`;
}

function Balance({ acct, reload }: { acct: any; reload: () => void }) {
  const [threshold, setThreshold] = useState(acct.alert ? (acct.alert.threshold / 100).toFixed(2) : '');
  const [webhook, setWebhook] = useState(acct.alert?.webhook_url ?? '');
  const [error, setError] = useState<string | null>(null);
  const [saved, setSaved] = useState(false);
  const save = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setSaved(false);
    const fen = parseYuan(threshold);
    if (fen === null || fen < 0) return setError(t('create.bad_amount'));
    try {
      await setAlert(fen, webhook || null);
      setSaved(true);
      reload();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <div class="detail-grid">
      <section class="card" aria-labelledby="bal-h">
        <h2 id="bal-h">{t('billing.balance')}</h2>
        <p class="big" data-testid="balance">{formatFen(acct.balance)}</p>
        <p>{t(`billing.state_${acct.state}` as any)}{acct.arrears_since && ` · ${t('billing.arrears_since', { time: formatTime(acct.arrears_since) })}`}</p>
      </section>
      <form class="card" onSubmit={save} aria-labelledby="alert-h">
        <h2 id="alert-h">{t('billing.alert')}</h2>
        <Field label={t('billing.alert_threshold')}>{(id) => <input id={id} inputMode="decimal" value={threshold} onInput={(e) => setThreshold((e.target as HTMLInputElement).value)} />}</Field>
        <Field label={t('billing.alert_webhook')}>{(id) => <input id={id} type="url" value={webhook} onInput={(e) => setWebhook((e.target as HTMLInputElement).value)} />}</Field>
        {error && <p class="error" role="alert">{error}</p>}
        {saved && <p role="status">{t('common.saved')}</p>}
        <div class="row">
          <button type="submit" class="primary">{t('common.save')}</button>
          {acct.alert && <button type="button" onClick={() => clearAlert().then(reload, (e) => setError(errorText(e)))}>{t('billing.alert_clear')}</button>}
        </div>
      </form>
    </div>
  );
}

function Idle() {
  const data = useLoad(idle);
  const [pending, setPending] = useState<IdleItem | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const clean = async () => {
    if (!pending) return;
    setBusy(true);
    setError(null);
    try {
      if (pending.kind === 'system_disk') await releaseInstance(pending.resource);
      else if (pending.kind === 'data_disk') await deleteDisk(pending.resource);
      else if (pending.kind === 'snapshot') await deleteSnapshot(pending.resource);
      else if (pending.kind === 'image') await deleteImage(pending.resource);
      setPending(null);
      data.reload();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section aria-labelledby="idle-bill-h">
      <h2 id="idle-bill-h">{t('billing.idle_title')}</h2>
      {!data.data ? <Loading error={data.error} /> : data.data.items.length === 0 ? <Empty text={t('billing.idle_none')} /> : (
        <>
          <p>{t('billing.idle_total', { amount: formatFen(data.data.cost_per_day) })}</p>
          <table class="table">
            <thead><tr><th scope="col">{t('disks.name')}</th><th scope="col">{t('disks.kind')}</th><th scope="col">{t('billing.why')}</th><th scope="col">{t('billing.since')}</th><th scope="col">{t('billing.per_day')}</th><th scope="col">{t('instances.actions')}</th></tr></thead>
            <tbody>
              {data.data.items.map((i: any) => (
                <tr aria-label={i.name ?? i.resource}>
                  <td data-label={t('disks.name')}>{i.name ?? i.resource}</td>
                  <td data-label={t('disks.kind')}>{t(`kind.${i.kind}` as any)}{i.size_gib ? ` · ${i.size_gib} GiB` : ''}</td>
                  <td data-label={t('billing.why')}>{idleWhy(i.why)}</td>
                  <td data-label={t('billing.since')}>{formatTime(i.since)}</td>
                  <td data-label={t('billing.per_day')}>{formatFen(i.cost_per_day)}</td>
                  <td data-label={t('instances.actions')}>
                    <button type="button" class="small danger" aria-label={t('billing.clean_named', { name: i.name ?? i.resource })} onClick={() => (setError(null), setPending(i))}>
                      {i.kind === 'system_disk' ? t('action.release') : t('common.delete')}
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      {pending && (
        <Dialog title={t('billing.clean_named', { name: (pending as any).name ?? pending.resource })} confirmLabel={pending.kind === 'system_disk' ? t('action.release') : t('common.delete')}
          danger busy={busy} error={error} onConfirm={clean} onCancel={() => setPending(null)}>
          <p>{pending.kind === 'system_disk' ? t('billing.clean_instance') : t('billing.clean_other')}</p>
          <p>{t('billing.clean_saves', { amount: formatFen(pending.cost_per_day) })}</p>
        </Dialog>
      )}
    </section>
  );
}

function Subscriptions() {
  // GET /billing/subscriptions: active ones first (soonest to end first), then ended ones.
  const data = useLoad(subscriptions);
  const subs = data.data ?? [];
  return (
    <section aria-labelledby="subs-h">
      <h2 id="subs-h">{t('billing.subscriptions')}</h2>
      {!data.data ? <Loading error={data.error} /> : subs.length === 0 ? <Empty text={t('billing.no_subscriptions')} /> : (
        <table class="table" aria-labelledby="subs-h">
          <thead><tr>
            <th scope="col">{t('instances.name')}</th><th scope="col">{t('billing.term')}</th><th scope="col">{t('billing.sub_status')}</th>
            <th scope="col">{t('billing.started')}</th><th scope="col">{t('billing.expires')}</th><th scope="col">{t('create.auto_renew')}</th>
            <th scope="col">{t('billing.paid')}</th>
          </tr></thead>
          <tbody>
            {subs.map((x) => (
              <tr aria-label={x.name}>
                <td data-label={t('instances.name')}>{x.name}</td>
                <td data-label={t('billing.term')}>{t(`billing.mode.${x.term}` as any)}</td>
                <td data-label={t('billing.sub_status')}>{t(x.status === 'active' ? 'billing.sub_active' : 'billing.sub_ended')}</td>
                <td data-label={t('billing.started')}>{formatTime(x.started_at)}</td>
                <td data-label={t('billing.expires')}>{formatTime(x.expires_at)}</td>
                <td data-label={t('create.auto_renew')}>
                  {x.status === 'active' ? (
                    <label class="check">
                      <input type="checkbox" checked={x.auto_renew} onChange={(e) => updateInstance(x.instance, { billing: { auto_renew: (e.target as HTMLInputElement).checked } }).then(data.reload)} />
                      <span class="sr-only">{t('billing.auto_renew_named', { name: x.name })}</span>
                    </label>
                  ) : '—'}
                </td>
                <td data-label={t('billing.paid')}>
                  {formatFen(x.paid)}{x.payments > 1 ? ` (${t('billing.n_payments', { n: x.payments })})` : ''}
                  {x.refunded > 0 ? ` · ${t('billing.refunded_amount', { amount: formatFen(x.refunded) })}` : ''}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Usage() {
  const [days, setDays] = useState(30);
  const since = useMemo(() => new Date(Date.now() - days * 86400000).toISOString().replace(/\.\d+Z$/, 'Z'), [days]);
  const until = useMemo(() => new Date(Date.now() + 86400000).toISOString().replace(/\.\d+Z$/, 'Z'), [days]);
  const data = useLoad(() => usage(since, until, 'day'), [days]);
  const chart = useMemo(() => {
    const items = data.data ?? [];
    const dayList = [...new Set(items.map((i) => i.day!).filter(Boolean))].sort();
    const x = dayList.map((d) => Date.parse(d + 'T12:00:00Z') / 1000);
    const kinds = KINDS.filter((k) => items.some((i) => i.kind === k));
    return {
      x,
      series: kinds.map((k) => ({
        label: t(`kind.${k}` as any),
        values: dayList.map((d) => items.filter((i) => i.day === d && i.kind === k).reduce((s, i) => s + i.amount, 0) / 100),
      })),
    };
  }, [data.data]);
  return (
    <section aria-labelledby="usage-h">
      <div class="row">
        <h2 id="usage-h">{t('billing.usage')}</h2>
        <label class="inline">{t('billing.period')}
          <select value={days} onChange={(e) => setDays(Number((e.target as HTMLSelectElement).value))}>
            <option value={7}>{t('billing.last_n_days', { n: 7 })}</option>
            <option value={30}>{t('billing.last_n_days', { n: 30 })}</option>
            <option value={90}>{t('billing.last_n_days', { n: 90 })}</option>
          </select>
        </label>
      </div>
      {!data.data ? <Loading error={data.error} /> : chart.x.length === 0 ? <Empty text={t('billing.no_usage')} /> : (
        <Chart title={t('billing.usage_chart')} x={chart.x} series={chart.series} unit=" ¥" bars days />
      )}
    </section>
  );
}

function Ledger() {
  const [kind, setKind] = useState('');
  const [since, setSince] = useState('');
  const [until, setUntil] = useState('');
  const toIso = (d: string) => (d ? new Date(d + 'T00:00:00').toISOString().replace(/\.\d+Z$/, 'Z') : undefined);
  const data = useLoad(() => ledger(toIso(since), until ? new Date(new Date(until + 'T00:00:00').getTime() + 86400000).toISOString().replace(/\.\d+Z$/, 'Z') : undefined), [since, until]);
  const rows = (data.data ?? []).filter((e) => !kind || e.kind === kind);
  return (
    <section aria-labelledby="ledger-h">
      <h2 id="ledger-h">{t('billing.ledger')}</h2>
      <div class="row filters">
        <label class="inline">{t('billing.kind')}
          <select value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value)}>
            <option value="">{t('billing.all_kinds')}</option>
            {LEDGER_KINDS.map((k) => <option value={k}>{t(`ledger.${k}`)}</option>)}
          </select>
        </label>
        <label class="inline">{t('billing.from')}<input type="date" value={since} onInput={(e) => setSince((e.target as HTMLInputElement).value)} /></label>
        <label class="inline">{t('billing.to')}<input type="date" value={until} onInput={(e) => setUntil((e.target as HTMLInputElement).value)} /></label>
      </div>
      {!data.data ? <Loading error={data.error} /> : rows.length === 0 ? <Empty text={t('billing.no_entries')} /> : (
        <table class="table ledger">
          <thead><tr><th scope="col">{t('billing.time')}</th><th scope="col">{t('billing.kind')}</th><th scope="col">{t('billing.description')}</th><th scope="col">{t('billing.amount')}</th><th scope="col">{t('billing.balance_after')}</th></tr></thead>
          <tbody>
            {rows.slice(0, 500).map((e) => (
              <tr>
                <td data-label={t('billing.time')}>{formatTime(e.time)}</td>
                <td data-label={t('billing.kind')}>{t(`ledger.${e.kind}` as any)}</td>
                <td data-label={t('billing.description')}>{e.description}{e.resource ? ` · ${e.resource}` : ''}</td>
                <td data-label={t('billing.amount')} class={e.amount < 0 ? 'neg' : 'pos'}>{formatFen(e.amount)}</td>
                <td data-label={t('billing.balance_after')}>{formatFen(e.balance_after)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Statements() {
  const now = new Date();
  const months = Array.from({ length: 6 }, (_, i) => monthOf(new Date(now.getFullYear(), now.getMonth() - i, 1)));
  const [month, setMonth] = useState(months[0]);
  const data = useLoad(() => statement(month), [month]);
  const s: any = data.data;
  return (
    <section aria-labelledby="stmt-h">
      <div class="row">
        <h2 id="stmt-h">{t('billing.statements')}</h2>
        <label class="inline">{t('billing.month')}
          <select value={month} onChange={(e) => setMonth((e.target as HTMLSelectElement).value)}>{months.map((m) => <option value={m}>{m}</option>)}</select>
        </label>
      </div>
      {!s ? <Loading error={data.error} /> : (
        <dl class="facts statement">
          <dt>{t('billing.opening')}</dt><dd>{formatFen(s.opening_balance)}</dd>
          <dt>{t('billing.credits')}</dt><dd>{formatFen(s.credits)}</dd>
          {typeof s.charges === 'object' && Object.entries(s.charges as Record<string, number>).map(([k, v]) => (<><dt>{t(`kind.${k}` as any)}</dt><dd>{formatFen(v)}</dd></>))}
          <dt>{t('billing.charges_total')}</dt><dd>{formatFen(s.charges_total ?? (typeof s.charges === 'number' ? s.charges : null))}</dd>
          <dt>{t('billing.closing')}</dt><dd>{formatFen(s.closing_balance)}</dd>
        </dl>
      )}
    </section>
  );
}

export default function Billing() {
  const acct = useLoad(account);
  return (
    <section>
      <PageTitle>{t('billing.title')}</PageTitle>
      {!acct.data ? <Loading error={acct.error} /> : <Balance acct={acct.data} reload={acct.reload} />}
      <Idle />
      <Subscriptions />
      <Usage />
      <Ledger />
      <Statements />
    </section>
  );
}
