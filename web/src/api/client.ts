// The one place the console talks HTTP. Cookie sign-in: the browser sends `gpucloud_session`
// itself; every unsafe request carries `X-CSRF-Token`. Errors are problem+json → ApiError.
import { signal } from '@preact/signals';

export const BASE = '/api/v1';
export const csrfToken = signal<string>('');
// Called when any request answers 401 (the session ended elsewhere).
export const onUnauthorized = { handler: () => {} };

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    public detail: string,
    public body: Record<string, unknown> = {},
  ) {
    super(detail || code || `HTTP ${status}`);
  }
  // The request field a problem's detail names (e.g. "system_disk_gib must be ..."), if any.
  fieldIn(fields: string[]): string | null {
    return problemField(this.detail, fields);
  }
}

export function problemField(detail: string, fields: string[]): string | null {
  let best: string | null = null;
  let bestAt = Infinity;
  for (const f of fields) {
    const re = new RegExp(`(^|[^a-z_])${f.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}([^a-z_]|$)`);
    const m = re.exec(detail);
    if (m && m.index < bestAt) {
      best = f;
      bestAt = m.index;
    }
  }
  return best;
}

export interface ListPage<T> {
  items: T[];
  next_cursor: string | null;
}

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined | null>;
  headers?: Record<string, string>;
}

function devToken(): string | null {
  // Development only (`npm run dev` against a daemon without browser sign-in): a bearer token
  // put in localStorage by hand. The built console never reads it.
  if (import.meta.env.DEV) return localStorage.getItem('gpucloud_dev_token');
  return null;
}

export async function request<T>(method: string, path: string, body?: unknown, opts: RequestOptions = {}): Promise<T> {
  let url = BASE + path;
  if (opts.query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
    const s = q.toString();
    if (s) url += (url.includes('?') ? '&' : '?') + s;
  }
  const headers: Record<string, string> = { Accept: 'application/json', ...opts.headers };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD' && csrfToken.value) headers['X-CSRF-Token'] = csrfToken.value;
  const dev = devToken();
  if (dev) headers.Authorization = `Bearer ${dev}`;
  const init: RequestInit = {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  };
  let res: Response;
  try {
    res = await fetch(url, init);
  } catch (e) {
    // A network failure (a keep-alive connection closed under the request): a GET is safe to
    // send once more; anything else is reported, never repeated.
    if (method !== 'GET') throw e;
    await new Promise((r) => setTimeout(r, 200));
    res = await fetch(url, init);
  }
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let data: any = undefined;
  try {
    data = text ? JSON.parse(text) : undefined;
  } catch {
    data = undefined;
  }
  if (!res.ok) {
    if (res.status === 401 && !path.startsWith('/auth/')) onUnauthorized.handler();
    throw new ApiError(res.status, data?.code ?? 'http_error', data?.detail ?? data?.title ?? text.slice(0, 200), data ?? {});
  }
  return data as T;
}

export const get = <T>(path: string, query?: RequestOptions['query']) => request<T>('GET', path, undefined, { query });
export const post = <T>(path: string, body?: unknown, headers?: Record<string, string>) =>
  request<T>('POST', path, body ?? {}, { headers });
export const put = <T>(path: string, body: unknown) => request<T>('PUT', path, body);
export const patch = <T>(path: string, body: unknown) => request<T>('PATCH', path, body);
export const del = <T>(path: string) => request<T>('DELETE', path);

// Every page of a collection (the console's lists are small; the cap keeps it bounded).
export async function listAll<T>(path: string, query: RequestOptions['query'] = {}, cap = 5000): Promise<T[]> {
  const out: T[] = [];
  let cursor: string | null = null;
  do {
    const page: ListPage<T> = await get<ListPage<T>>(path, { ...query, limit: 1000, cursor });
    out.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && out.length < cap);
  return out;
}

export function idempotencyKey(): string {
  const a = new Uint8Array(16);
  crypto.getRandomValues(a);
  return Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
}
