// Times come as RFC 3339 UTC; they are shown in the browser's own zone.
import { lang } from '../i18n';

export function formatTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toLocaleString(lang.value === 'zh' ? 'zh-CN' : 'en-GB', {
    year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit',
  });
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return '—';
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const zh = lang.value === 'zh';
  if (d > 0) return zh ? `${d}天${h}小时` : `${d}d ${h}h`;
  if (h > 0) return zh ? `${h}小时${m}分` : `${h}h ${m}m`;
  return zh ? `${m}分` : `${m}m`;
}

// Whole days from now until `iso` (never below 0).
export function daysLeft(iso: string | null | undefined, now = Date.now()): number | null {
  if (!iso) return null;
  const t = new Date(iso).getTime();
  if (Number.isNaN(t)) return null;
  return Math.max(0, Math.ceil((t - now) / 86400000));
}
