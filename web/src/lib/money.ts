// Money arrives from the API as integer fen (1/100 yuan). Shown as ¥12.34; negatives as -¥12.34.
export function formatFen(fen: number | null | undefined): string {
  if (fen === null || fen === undefined || !Number.isFinite(fen)) return '—';
  const n = Math.round(fen);
  const sign = n < 0 ? '-' : '';
  const abs = Math.abs(n);
  const yuan = Math.floor(abs / 100).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  const cents = (abs % 100).toString().padStart(2, '0');
  return `${sign}¥${yuan}.${cents}`;
}

// Parses what a person types ("12", "12.3", "¥1,234.56") into fen; null when it is not an amount.
export function parseYuan(text: string): number | null {
  const cleaned = text.trim().replace(/^(-?)¥/, '$1').replace(/,/g, '');
  if (!/^-?\d+(\.\d{1,2})?$/.test(cleaned)) return null;
  const negative = cleaned.startsWith('-');
  const [whole, frac = ''] = cleaned.replace('-', '').split('.');
  const fen = Number(whole) * 100 + Number(frac.padEnd(2, '0'));
  return negative ? -fen : fen;
}

export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}
