// Client routes: plain paths (gpucloudd answers unknown non-API paths with index.html).
import { signal } from '@preact/signals';

export const path = signal<string>(globalThis.location?.pathname ?? '/');

export function navigate(to: string, replace = false) {
  if (to === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  path.value = location.pathname;
  window.scrollTo(0, 0);
}

if (globalThis.window) {
  window.addEventListener('popstate', () => {
    path.value = location.pathname;
  });
}

// "/instances/:id" against "/instances/i-abc" → {id: "i-abc"}; null when it does not match.
export function match(pattern: string, actual: string): Record<string, string> | null {
  const p = pattern.split('/').filter(Boolean);
  const a = actual.split('/').filter(Boolean);
  if (p.length !== a.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(':')) out[p[i].slice(1)] = decodeURIComponent(a[i]);
    else if (p[i] !== a[i]) return null;
  }
  return out;
}
