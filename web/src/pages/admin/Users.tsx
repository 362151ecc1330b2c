// Operator: users — credit with a note (Idempotency-Key per dialog), quotas, disable.
import { useState } from 'preact/hooks';
import { t } from '../../i18n';
import { creditUser, getQuota, listUsers, setDisabled, setQuota } from '../../api/admin';
import { idempotencyKey } from '../../api/client';
import type { Quota, User } from '../../api/types';
import { formatFen, parseYuan } from '../../lib/money';
import { formatTime } from '../../lib/time';
import { Dialog, errorText, Field, Loading, PageTitle, useLoad } from '../../components/ui';

function CreditDialog({ u, onClose }: { u: User; onClose: (done: boolean) => void }) {
  const [amount, setAmount] = useState('');
  const [note, setNote] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [key] = useState(idempotencyKey);
  const fen = parseYuan(amount);
  const run = async () => {
    if (fen === null || fen === 0) return setError(t('create.bad_amount'));
    setBusy(true);
    try {
      await creditUser(u.id, fen, note, key);
      onClose(true);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <Dialog title={t('users.credit_named', { name: u.username })} confirmLabel={t('users.credit')} busy={busy} error={error} onConfirm={run} onCancel={() => onClose(false)}>
      <Field label={t('users.amount')} hint={t('users.amount_hint')}>{(id) => <input id={id} inputMode="decimal" value={amount} onInput={(e) => setAmount((e.target as HTMLInputElement).value)} />}</Field>
      <Field label={t('users.note')}>{(id) => <input id={id} value={note} maxLength={500} onInput={(e) => setNote((e.target as HTMLInputElement).value)} />}</Field>
      {fen !== null && <p>{t('users.credit_preview', { amount: formatFen(fen), name: u.username })}</p>}
    </Dialog>
  );
}

function QuotaDialog({ u, onClose }: { u: User; onClose: () => void }) {
  const data = useLoad(() => getQuota(u.id));
  const [q, setQ] = useState<Partial<Record<keyof Quota, string>>>({});
  const [error, setError] = useState<string | null>(null);
  const keys: (keyof Quota)[] = ['gpus', 'instances', 'disk_gib', 'images'];
  const value = (k: keyof Quota) => q[k] ?? (data.data?.[k] === null || data.data?.[k] === undefined ? '' : String(data.data[k]));
  const save = async () => {
    const body: any = {};
    for (const k of keys) body[k] = value(k) === '' ? null : Number(value(k));
    try {
      await setQuota(u.id, body);
      onClose();
    } catch (e) {
      setError(errorText(e));
    }
  };
  return (
    <Dialog title={t('users.quota_named', { name: u.username })} confirmLabel={t('common.save')} error={error} onConfirm={save} onCancel={onClose}>
      {!data.data ? <Loading error={data.error} /> : keys.map((k) => (
        <Field label={t(`quota.${k}`)} hint={t('users.quota_default', { n: String((data.data as any).defaults?.[k] ?? '—'), used: String((data.data as any).used?.[k] ?? 0) })}>
          {(id) => <input id={id} type="number" min={0} value={value(k)} onInput={(e) => setQ({ ...q, [k]: (e.target as HTMLInputElement).value })} />}
        </Field>
      ))}
    </Dialog>
  );
}

export function Users() {
  const data = useLoad(listUsers);
  const [credit, setCredit] = useState<User | null>(null);
  const [quota, setQuotaFor] = useState<User | null>(null);
  const [msg, setMsg] = useState<string | null>(null);
  if (!data.data) return <Loading error={data.error} />;
  return (
    <section>
      <PageTitle>{t('users.title')}</PageTitle>
      {msg && <p role="status" class="notice">{msg}</p>}
      <table class="table">
        <thead><tr><th scope="col">{t('auth.username')}</th><th scope="col">{t('account.role')}</th><th scope="col">{t('users.status')}</th><th scope="col">{t('detail.created')}</th><th scope="col">{t('instances.actions')}</th></tr></thead>
        <tbody>
          {data.data.map((u) => (
            <tr aria-label={u.username}>
              <td data-label={t('auth.username')}>{u.username}<div class="muted small">{u.id}</div></td>
              <td data-label={t('account.role')}>{u.role === 'admin' ? t('account.role_admin') : t('account.role_user')}</td>
              <td data-label={t('users.status')}>{u.disabled ? t('users.disabled') : t('users.active')}</td>
              <td data-label={t('detail.created')}>{formatTime(u.created_at)}</td>
              <td data-label={t('instances.actions')} class="row-actions">
                <button type="button" class="small" aria-label={t('users.credit_named', { name: u.username })} onClick={() => setCredit(u)}>{t('users.credit')}</button>
                <button type="button" class="small" aria-label={t('users.quota_named', { name: u.username })} onClick={() => setQuotaFor(u)}>{t('users.quota')}</button>
                <button type="button" class="small danger" aria-label={t(u.disabled ? 'users.enable_named' : 'users.disable_named', { name: u.username })}
                  onClick={() => setDisabled(u.id, !u.disabled).then(data.reload, (e) => setMsg(errorText(e)))}>
                  {u.disabled ? t('users.enable') : t('users.disable')}
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {credit && <CreditDialog u={credit} onClose={(done) => { if (done) setMsg(t('users.credited', { name: credit.username })); setCredit(null); }} />}
      {quota && <QuotaDialog u={quota} onClose={() => setQuotaFor(null)} />}
    </section>
  );
}
