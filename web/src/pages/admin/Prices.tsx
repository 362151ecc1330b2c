// Operator: the price table (per GPU model per hour/week/month; no-GPU hour; storage prices).
import { useEffect, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { getPrices, setPrices } from '../../api/admin';
import { formatFen, parseYuan } from '../../lib/money';
import { errorText, Field, Loading, PageTitle, useLoad } from '../../components/ui';

const STORAGE = ['system_disk_per_gib_hour_micros', 'data_disk_per_gib_hour_micros', 'snapshot_per_gib_hour_micros', 'image_per_gib_hour_micros'] as const;

export function Prices() {
  const data = useLoad(getPrices);
  const [table, setTable] = useState<any>(null);
  const [msg, setMsg] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    if (data.data) setTable(structuredClone(data.data));
  }, [data.data]);
  if (!table) return <Loading error={data.error} />;
  const money = (v: number) => (v / 100).toFixed(2);
  const save = async (e: Event) => {
    e.preventDefault();
    setError(null);
    setMsg(null);
    const { currency, ...body } = table;
    try {
      await setPrices(body);
      setMsg(t('common.saved'));
      data.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };
  const setGpu = (i: number, k: string, text: string) => {
    const fen = parseYuan(text);
    if (fen === null) return;
    const gpus = table.gpus.map((g: any, j: number) => (j === i ? { ...g, [k]: fen } : g));
    setTable({ ...table, gpus });
  };
  return (
    <section>
      <PageTitle>{t('prices.title')}</PageTitle>
      <form onSubmit={save}>
        <table class="table">
          <thead><tr><th scope="col">{t('prices.model')}</th><th scope="col">{t('market.price_hour')}</th><th scope="col">{t('market.price_week')}</th><th scope="col">{t('market.price_month')}</th></tr></thead>
          <tbody>
            {table.gpus.map((g: any, i: number) => (
              <tr>
                <td>{g.gpu_model}</td>
                {(['price_per_gpu_hour', 'price_per_gpu_week', 'price_per_gpu_month'] as const).map((k) => (
                  <td><input aria-label={t(`prices.${k}_named`, { model: g.gpu_model })} inputMode="decimal" defaultValue={money(g[k])} onChange={(e) => setGpu(i, k, (e.target as HTMLInputElement).value)} /></td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
        <div class="detail-grid">
          <Field label={t('prices.no_gpu_hour')} hint={formatFen(table.no_gpu_price_per_hour)}>
            {(id) => <input id={id} inputMode="decimal" defaultValue={money(table.no_gpu_price_per_hour)} onChange={(e) => { const f = parseYuan((e.target as HTMLInputElement).value); if (f !== null) setTable({ ...table, no_gpu_price_per_hour: f }); }} />}
          </Field>
          <Field label={t('prices.free_system_disk')}>
            {(id) => <input id={id} type="number" min={0} value={table.system_disk_free_gib} onInput={(e) => setTable({ ...table, system_disk_free_gib: Number((e.target as HTMLInputElement).value) })} />}
          </Field>
          {STORAGE.map((k) => (
            <Field label={t(`prices.${k}`)} hint={t('prices.micros_hint')}>
              {(id) => <input id={id} type="number" min={0} value={table[k]} onInput={(e) => setTable({ ...table, [k]: Number((e.target as HTMLInputElement).value) })} />}
            </Field>
          ))}
        </div>
        {error && <p class="error" role="alert">{error}</p>}
        {msg && <p role="status">{msg}</p>}
        <button type="submit" class="primary">{t('common.save')}</button>
      </form>
    </section>
  );
}
