// The console's shell: navigation, language switch, and the route table.
import type { ComponentType } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { lang, setLang, t, type Key } from './i18n';
import { match, navigate, path } from './lib/router';
import { sessionChecked, signOut, user } from './session';
import { SignIn, SignUp } from './pages/auth/Auth';
import { Market } from './pages/market/Market';
import { InstanceList } from './pages/instances/InstanceList';
import { CreateInstance } from './pages/instances/CreateInstance';
import { Disks } from './pages/disks/Disks';
import { Images } from './pages/images/Images';
import { SecurityGroups } from './pages/securityGroups/SecurityGroups';
import { SshKeys } from './pages/sshKeys/SshKeys';
import { AccountPage } from './pages/account/Account';
import { Hosts } from './pages/admin/Hosts';
import { AdminInstances } from './pages/admin/AdminInstances';
import { Users } from './pages/admin/Users';
import { Prices } from './pages/admin/Prices';
import { Loading } from './components/ui';

// Pages that pull in xterm.js or uPlot load on demand, so the first page stays small.
function lazy<P>(load: () => Promise<{ default: ComponentType<P> }>): ComponentType<P> {
  let loaded: ComponentType<P> | null = null;
  return (props: P) => {
    const [C, setC] = useState<ComponentType<P> | null>(() => loaded);
    const [failed, setFailed] = useState(false);
    useEffect(() => {
      if (!C)
        load().then(
          (m) => ((loaded = m.default), setC(() => m.default)),
          // A console updated since this page loaded no longer has the old chunk: reload.
          () => setFailed(true),
        );
    }, []);
    if (failed)
      return (
        <div role="alert">
          <p>{t('common.load_failed')}</p>
          <button type="button" class="primary" onClick={() => location.reload()}>{t('common.reload')}</button>
        </div>
      );
    return C ? <C {...(props as any)} /> : <Loading />;
  };
}
const InstanceDetail = lazy<{ id: string; tab?: string }>(() => import('./pages/instances/InstanceDetail'));
const Billing = lazy<{}>(() => import('./pages/billing/Billing'));
const Revenue = lazy<{}>(() => import('./pages/admin/Revenue'));

interface Route { path: string; render: (p: Record<string, string>) => any; admin?: boolean }
const routes: Route[] = [
  { path: '/', render: () => <Market /> },
  { path: '/market', render: () => <Market /> },
  { path: '/create', render: () => <CreateInstance /> },
  { path: '/instances', render: () => <InstanceList /> },
  { path: '/instances/:id', render: (p) => <InstanceDetail id={p.id} /> },
  { path: '/instances/:id/:tab', render: (p) => <InstanceDetail id={p.id} tab={p.tab} /> },
  { path: '/disks', render: () => <Disks /> },
  { path: '/images', render: () => <Images /> },
  { path: '/security-groups', render: () => <SecurityGroups /> },
  { path: '/ssh-keys', render: () => <SshKeys /> },
  { path: '/billing', render: () => <Billing /> },
  { path: '/account', render: () => <AccountPage /> },
  { path: '/admin/hosts', render: () => <Hosts />, admin: true },
  { path: '/admin/instances', render: () => <AdminInstances />, admin: true },
  { path: '/admin/users', render: () => <Users />, admin: true },
  { path: '/admin/prices', render: () => <Prices />, admin: true },
  { path: '/admin/revenue', render: () => <Revenue />, admin: true },
];

const userNav: [string, Key][] = [
  ['/market', 'nav.market'],
  ['/create', 'nav.create'],
  ['/instances', 'nav.instances'],
  ['/disks', 'nav.disks'],
  ['/images', 'nav.images'],
  ['/security-groups', 'nav.security_groups'],
  ['/ssh-keys', 'nav.ssh_keys'],
  ['/billing', 'nav.billing'],
  ['/account', 'nav.account'],
];
const adminNav: [string, Key][] = [
  ['/admin/hosts', 'nav.hosts'],
  ['/admin/instances', 'nav.all_instances'],
  ['/admin/users', 'nav.users'],
  ['/admin/prices', 'nav.prices'],
  ['/admin/revenue', 'nav.revenue'],
];

export function Link(props: { href: string; children: any; class?: string; 'aria-current'?: any; 'aria-label'?: string }) {
  return (
    <a
      {...props}
      onClick={(e) => {
        if (e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
        e.preventDefault();
        navigate(props.href);
      }}
    />
  );
}

function LangSwitch() {
  return (
    <label class="lang">
      <span class="sr-only">{t('nav.language')}</span>
      <select aria-label={t('nav.language')} value={lang.value} onChange={(e) => setLang((e.target as HTMLSelectElement).value as any)}>
        <option value="en">English</option>
        <option value="zh">中文</option>
      </select>
    </label>
  );
}

export function App() {
  const [menuOpen, setMenuOpen] = useState(false);
  void lang.value; // re-render every page when the language changes
  const p = path.value;
  useEffect(() => setMenuOpen(false), [p]);
  useEffect(() => {
    document.title = 'gpucloud';
  }, [lang.value]);

  if (!sessionChecked.value) return <main class="auth"><Loading /></main>;
  const u = user.value;
  if (!u) {
    if (p === '/signup') return <SignUp />;
    return <SignIn />;
  }
  if (p === '/signin' || p === '/signup') {
    navigate('/market', true);
    return null;
  }
  let page: any = null;
  for (const r of routes) {
    const m = match(r.path, p);
    if (m && (!r.admin || u.role === 'admin')) {
      page = r.render(m);
      break;
    }
  }
  const navItem = ([href, key]: [string, Key]) => (
    <li key={href}>
      <Link href={href} aria-current={p === href || (href !== '/market' && p.startsWith(href + '/')) || (href === '/market' && p === '/') ? 'page' : undefined}>
        {t(key)}
      </Link>
    </li>
  );
  return (
    <div class="shell">
      <header class="topbar">
        <button type="button" class="menu-toggle" aria-expanded={menuOpen} aria-controls="sidenav" onClick={() => setMenuOpen(!menuOpen)}>
          {t('nav.menu')}
        </button>
        <Link href="/market" class="brand">gpucloud</Link>
        <div class="spacer" />
        <LangSwitch />
        <span class="who">{u.username}</span>
        <button type="button" onClick={() => signOut().then(() => navigate('/signin'))}>{t('nav.sign_out')}</button>
      </header>
      <nav id="sidenav" class={'sidenav' + (menuOpen ? ' open' : '')} aria-label={t('nav.main')}>
        <ul>{userNav.map(navItem)}</ul>
        {u.role === 'admin' && (
          <>
            <h2 class="nav-heading">{t('nav.operator')}</h2>
            <ul>{adminNav.map(navItem)}</ul>
          </>
        )}
      </nav>
      <main class="content" id="main">
        {page ?? (
          <div>
            <h1>{t('common.not_found')}</h1>
            <Link href="/market">{t('nav.market')}</Link>
          </div>
        )}
      </main>
    </div>
  );
}
