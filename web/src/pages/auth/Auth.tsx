// Sign in and sign up. Sign-in sets the session cookie (POST /auth/session); sign-up registers
// then signs in.
import { useState } from 'preact/hooks';
import { lang, setLang, t } from '../../i18n';
import { ApiError } from '../../api/client';
import { register, signIn } from '../../api/session';
import { adopt, notice } from '../../session';
import { navigate } from '../../lib/router';
import { errorText, Field } from '../../components/ui';

function LangToggle() {
  const other = lang.value === 'zh' ? 'en' : 'zh';
  return (
    <button type="button" class="link" onClick={() => setLang(other)} lang={other === 'zh' ? 'zh-CN' : 'en'}>
      {other === 'zh' ? '中文' : 'English'}
    </button>
  );
}

export function SignIn() {
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      adopt(await signIn(username, password));
      notice.value = null;
      if (location.pathname === '/signin' || location.pathname === '/signup') navigate('/market', true);
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) setError(t('auth.bad_credentials'));
      else if (err instanceof ApiError && err.status === 429) setError(t('auth.rate_limited'));
      else setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="auth">
      <form class="card auth-card" onSubmit={submit} aria-labelledby="signin-title">
        <h1 id="signin-title">{t('auth.sign_in_title')}</h1>
        {notice.value && <p class="notice" role="status">{notice.value}</p>}
        <Field label={t('auth.username')}>
          {(id) => <input id={id} name="username" autocomplete="username" required value={username} onInput={(e) => setUsername((e.target as HTMLInputElement).value)} />}
        </Field>
        <Field label={t('auth.password')}>
          {(id) => <input id={id} name="password" type="password" autocomplete="current-password" required value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} />}
        </Field>
        {error && <p class="error" role="alert">{error}</p>}
        <button type="submit" class="primary" disabled={busy}>{t('auth.sign_in')}</button>
        <p>
          {t('auth.no_account')}{' '}
          <a href="/signup" onClick={(e) => { e.preventDefault(); navigate('/signup'); }}>{t('auth.sign_up')}</a>
        </p>
        <LangToggle />
      </form>
    </main>
  );
}

export function SignUp() {
  const [username, setUsername] = useState('');
  const [email, setEmail] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await register(username, password, email || undefined);
      adopt(await signIn(username, password));
      navigate('/market', true);
    } catch (err) {
      if (err instanceof ApiError && err.code === 'conflict') setError(t('auth.taken'));
      else setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="auth">
      <form class="card auth-card" onSubmit={submit} aria-labelledby="signup-title">
        <h1 id="signup-title">{t('auth.sign_up_title')}</h1>
        <Field label={t('auth.username')} hint={t('auth.username_hint')}>
          {(id) => <input id={id} name="username" autocomplete="username" required pattern="[a-z][a-z0-9_\-]{2,31}" value={username} onInput={(e) => setUsername((e.target as HTMLInputElement).value)} />}
        </Field>
        <Field label={t('auth.email')}>
          {(id) => <input id={id} name="email" type="email" autocomplete="email" value={email} onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />}
        </Field>
        <Field label={t('auth.password')} hint={t('auth.password_hint')}>
          {(id) => <input id={id} name="password" type="password" autocomplete="new-password" required minLength={8} value={password} onInput={(e) => setPassword((e.target as HTMLInputElement).value)} />}
        </Field>
        {error && <p class="error" role="alert">{error}</p>}
        <button type="submit" class="primary" disabled={busy}>{t('auth.create_account')}</button>
        <p>
          {t('auth.have_account')}{' '}
          <a href="/signin" onClick={(e) => { e.preventDefault(); navigate('/signin'); }}>{t('auth.sign_in')}</a>
        </p>
        <LangToggle />
      </form>
    </main>
  );
}
