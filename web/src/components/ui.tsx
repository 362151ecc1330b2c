// Small shared pieces: a labelled field, a state badge, a confirmation dialog, async loading.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { t, type Key } from '../i18n';
import { ApiError } from '../api/client';
import { stateTone } from '../lib/state';

let fieldSeq = 0;
export function useId(prefix = 'f') {
  const ref = useRef<string>('');
  if (!ref.current) ref.current = `${prefix}-${++fieldSeq}`;
  return ref.current;
}

export function Field(props: { label: string; error?: string | null; hint?: string; children: (id: string) => ComponentChildren }) {
  const id = useId();
  return (
    <div class={'field' + (props.error ? ' has-error' : '')}>
      <label for={id}>{props.label}</label>
      {props.children(id)}
      {props.hint && <small class="hint">{props.hint}</small>}
      {props.error && (
        <small class="error" role="alert" id={id + '-err'}>
          {props.error}
        </small>
      )}
    </div>
  );
}

export function stateLabel(state: string): string {
  const key = ('state.' + state) as Key;
  const s = t(key);
  return s === key ? state : s;
}

export function Badge({ state }: { state: string }) {
  return (
    <span class={`badge tone-${stateTone(state)}`} data-state={state}>
      {stateLabel(state)}
    </span>
  );
}

export function Dialog(props: {
  title: string;
  children: ComponentChildren;
  confirmLabel: string;
  danger?: boolean;
  busy?: boolean;
  error?: string | null;
  canConfirm?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const titleId = useId('dlg');
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);
  return (
    <dialog ref={ref} aria-labelledby={titleId} onCancel={(e) => { e.preventDefault(); props.onCancel(); }}>
      <h2 id={titleId}>{props.title}</h2>
      <div class="dialog-body">{props.children}</div>
      {props.error && <p class="error" role="alert">{props.error}</p>}
      <div class="actions">
        <button type="button" onClick={props.onCancel}>{t('common.cancel')}</button>
        <button
          type="button"
          class={props.danger ? 'danger' : 'primary'}
          disabled={props.busy || props.canConfirm === false}
          onClick={props.onConfirm}
        >
          {props.confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

export function errorText(e: unknown): string {
  if (e instanceof ApiError) return e.detail || e.code;
  if (e instanceof Error) return e.message;
  return String(e);
}

// Loads `load()` once (and again when `deps` change or `reload()` is called).
export function useLoad<T>(load: () => Promise<T>, deps: unknown[] = []) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    load().then(
      (d) => live && (setData(d), setError(null)),
      (e) => live && setError(errorText(e)),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  return { data, error, reload: () => setTick((x) => x + 1), setData };
}

export function Loading({ error }: { error?: string | null }) {
  if (error) return <p class="error" role="alert">{error}</p>;
  return <p class="muted" aria-busy="true">{t('common.loading')}</p>;
}

export function PageTitle({ children, actions }: { children: ComponentChildren; actions?: ComponentChildren }) {
  return (
    <div class="page-title">
      <h1>{children}</h1>
      {actions && <div class="title-actions">{actions}</div>}
    </div>
  );
}

export function CopyButton({ text, label }: { text: string; label: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      class="small"
      aria-label={label}
      onClick={async () => {
        try {
          await navigator.clipboard.writeText(text);
        } catch {
          const ta = document.createElement('textarea');
          ta.value = text;
          document.body.appendChild(ta);
          ta.select();
          document.execCommand('copy');
          ta.remove();
        }
        setDone(true);
        setTimeout(() => setDone(false), 1500);
      }}
    >
      {done ? t('common.copied') : t('common.copy')}
    </button>
  );
}

export function Empty({ text }: { text: string }) {
  return <p class="muted empty">{text}</p>;
}

// Server-written sentences the console knows the shape of, in the chosen language; anything
// else is shown as the server wrote it.
export function idleWhy(why: string): string {
  let m: RegExpMatchArray | null;
  if ((m = why.match(/^the instance is (\w+)$/))) return t('why.instance_is', { state: stateLabel(m[1]) });
  if ((m = why.match(/^its instance is (\w+)$/))) return t('why.its_instance_is', { state: stateLabel(m[1]) });
  if ((m = why.match(/^older than (\d+) days$/))) return t('why.older_than', { n: m[1] });
  if (why === 'not attached to an instance') return t('why.not_attached');
  if (why === 'no instance uses it') return t('why.unused_image');
  if (why === 'the instance runs without GPUs') return t('why.runs_without_gpus');
  if (why === 'simulated GPUs report no utilisation') return t('why.simulated_no_util');
  return why;
}

export function eventText(e: { type: string; message: string; data?: any }): string {
  if (e.type.startsWith('instance.') && e.data && typeof e.data.state === 'string' && e.data.name) {
    const s = t('event.instance_state', { name: e.data.name, state: stateLabel(e.data.state) });
    return e.data.reason ? `${s} (${e.data.reason})` : s;
  }
  return e.message;
}

// A long list shown a page at a time (50 rows by default), with a name filter: a table of
// 1,000 instances in one piece takes Chromium 650-1000 ms to lay out (docs/benchmarks.md).
export function usePaged<T>(items: T[], matches: (item: T, q: string) => boolean, initialSize = 50) {
  const [page, setPage] = useState(0);
  const [size, setSize] = useState(initialSize);
  const [q, setQ] = useState('');
  const filtered = q ? items.filter((i) => matches(i, q.toLowerCase())) : items;
  const pages = Math.max(1, Math.ceil(filtered.length / size));
  const current = Math.min(page, pages - 1);
  const rows = filtered.slice(current * size, current * size + size);
  const controls = filtered.length > initialSize || q ? (
    <div class="row pager">
      <label class="inline">
        {t('pager.filter')}
        <input type="search" value={q} onInput={(e) => (setQ((e.target as HTMLInputElement).value), setPage(0))} />
      </label>
      <div class="spacer" />
      <span class="muted">{t('pager.range', { from: filtered.length ? current * size + 1 : 0, to: current * size + rows.length, total: filtered.length })}</span>
      <button type="button" class="small" disabled={current === 0} onClick={() => setPage(current - 1)}>{t('pager.prev')}</button>
      <button type="button" class="small" disabled={current >= pages - 1} onClick={() => setPage(current + 1)}>{t('pager.next')}</button>
      <label class="inline">
        {t('pager.size')}
        <select value={size} onChange={(e) => (setSize(Number((e.target as HTMLSelectElement).value)), setPage(0))}>
          {[50, 100, 200].map((n) => <option value={n}>{n}</option>)}
        </select>
      </label>
    </div>
  ) : null;
  return { rows, controls };
}
