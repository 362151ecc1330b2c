// Account: password (optionally ending every session and API token), API tokens (the secret is
// shown once), language, and the user's quota.
import { useState } from 'preact/hooks';
import { lang, setLang, t } from '../../i18n';
import { changePassword, myQuota } from '../../api/session';
import { createToken, listTokens, revokeToken } from '../../api/tokens';
import type { Token } from '../../api/types';
import { CopyButton, Empty, errorText, Field, Loading, PageTitle, useLoad } from '../../components/ui';
import { formatTime } from '../../lib/time';
import { user, dropSession, notice } from '../../session';
import { navigate } from '../../lib/router';

function Password() {
  const [oldPw, setOld] = useState('');
  const [newPw, setNew] = useState('');
  const [revoke, setRevoke] = useState(false);
  const [msg, setMsg] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setMsg(null);
    try {
      await changePassword(oldPw, newPw, revoke);
      setOld('');
      setNew('');
      // A password change from the browser ends every session, this one too.
      notice.value = revoke ? t('account.password_changed_revoked') : t('account.password_changed');
      dropSession();
      navigate('/signin');
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <form class="card" onSubmit={submit} aria-labelledby="pw-h">
      <h2 id="pw-h">{t('account.password')}</h2>
      <Field label={t('account.old_password')}>{(id) => <input id={id} type="password" autocomplete="current-password" required value={oldPw} onInput={(e) => setOld((e.target as HTMLInputElement).value)} />}</Field>
      <Field label={t('account.new_password')} hint={t('auth.password_hint')}>{(id) => <input id={id} type="password" autocomplete="new-password" required minLength={8} value={newPw} onInput={(e) => setNew((e.target as HTMLInputElement).value)} />}</Field>
      <label class="check"><input type="checkbox" checked={revoke} onChange={(e) => setRevoke((e.target as HTMLInputElement).checked)} />{t('account.revoke_everywhere')}</label>
      {error && <p class="error" role="alert">{error}</p>}
      {msg && <p role="status">{msg}</p>}
      <button type="submit" class="primary">{t('account.change_password')}</button>
    </form>
  );
}

function Tokens() {
  const data = useLoad(listTokens);
  const [name, setName] = useState('');
  const [created, setCreated] = useState<Token | null>(null);
  const [error, setError] = useState<string | null>(null);
  const create = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      setCreated(await createToken(name));
      setName('');
      data.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <section class="card" aria-labelledby="tok-h">
      <h2 id="tok-h">{t('account.tokens')}</h2>
      <form class="inline-form" onSubmit={create}>
        <Field label={t('account.token_name')}>{(id) => <input id={id} required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />}</Field>
        <button type="submit" class="primary">{t('account.create_token')}</button>
      </form>
      {error && <p class="error" role="alert">{error}</p>}
      {created?.token && (
        <div class="notice" role="status">
          <p>{t('account.token_once')}</p>
          <code class="secret">{created.token}</code> <CopyButton text={created.token} label={t('account.copy_token')} />
        </div>
      )}
      {!data.data ? <Loading error={data.error} /> : data.data.length === 0 ? <Empty text={t('account.no_tokens')} /> : (
        <ul class="plain">
          {data.data.map((k) => (
            <li>
              {k.name} <span class="muted small">{formatTime(k.created_at)}</span>{' '}
              <button type="button" class="small danger" aria-label={t('account.revoke_named', { name: k.name })} onClick={() => revokeToken(k.id).then(data.reload, (e) => setError(errorText(e)))}>{t('account.revoke')}</button>
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

export function AccountPage() {
  const quota = useLoad(() => myQuota().catch(() => null));
  const u = user.value!;
  return (
    <section>
      <PageTitle>{t('account.title')}</PageTitle>
      <div class="detail-grid">
        <section class="card" aria-labelledby="me-h">
          <h2 id="me-h">{u.username}</h2>
          <dl class="facts">
            <dt>{t('account.role')}</dt><dd>{u.role === 'admin' ? t('account.role_admin') : t('account.role_user')}</dd>
            {u.email && (<><dt>{t('auth.email')}</dt><dd>{u.email}</dd></>)}
          </dl>
          <Field label={t('nav.language')}>
            {(id) => (
              <select id={id} value={lang.value} onChange={(e) => setLang((e.target as HTMLSelectElement).value as any)}>
                <option value="en">English</option>
                <option value="zh">中文</option>
              </select>
            )}
          </Field>
          {quota.data && (
            <>
              <h3>{t('account.quota')}</h3>
              <dl class="facts">
                {(['gpus', 'instances', 'disk_gib', 'images', 'snapshots'] as const).filter((k) => k in quota.data).map((k) => (
                  <><dt>{t(`quota.${k}`)}</dt><dd>{quota.data.used?.[k] ?? 0} / {quota.data[k] ?? '∞'}</dd></>
                ))}
              </dl>
            </>
          )}
        </section>
        <Password />
      </div>
      <Tokens />
    </section>
  );
}
