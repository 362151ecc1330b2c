// The GPU market: a card per zone and GPU model (and the zone's no-GPU offer), live free counts,
// a zone filter, and "notify me" on a sold-out model.
import { useEffect, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { createWatch, deleteWatch, listOffers, listWatches } from '../../api/market';
import type { Offer, Watch } from '../../api/types';
import { subscribe } from '../../api/events';
import { formatFen } from '../../lib/money';
import { errorText, Loading, PageTitle, useLoad } from '../../components/ui';
import { Link } from '../../app';

export function Market() {
  const offers = useLoad(listOffers);
  // Watches need the server's market watches (issue 24); without them the button is not shown.
  const watches = useLoad<Watch[] | null>(() => listWatches().catch(() => null));
  const [zone, setZone] = useState('');
  const [msg, setMsg] = useState<string | null>(null);
  useEffect(
    () =>
      subscribe((e) => {
        if (e.type === 'market.gpu_available' || e.type.startsWith('instance.')) offers.reload();
      }),
    [],
  );
  useEffect(() => {
    // For bench/console: navigation start -> market cards on screen with live data.
    if (offers.data) performance.mark('gpucloud:market-rendered');
  }, [offers.data]);
  if (!offers.data) return <Loading error={offers.error} />;
  const zones = [...new Set(offers.data.map((o) => o.zone))];
  const shown = offers.data.filter((o) => !zone || o.zone === zone);
  const watchOf = (o: Offer) => watches.data?.find((w) => w.zone === o.zone && w.gpu_model === o.gpu_model);
  const toggleWatch = async (o: Offer) => {
    setMsg(null);
    try {
      const w = watchOf(o);
      if (w) await deleteWatch(w.id);
      else await createWatch(o.zone, o.gpu_model!);
      setMsg(w ? t('market.watch_removed', { model: o.gpu_model! }) : t('market.watch_added', { model: o.gpu_model! }));
      watches.reload();
    } catch (e) {
      setMsg(errorText(e));
    }
  };
  return (
    <section>
      <PageTitle
        actions={
          <label class="inline">
            {t('market.zone')}
            <select value={zone} onChange={(e) => setZone((e.target as HTMLSelectElement).value)}>
              <option value="">{t('market.all_zones')}</option>
              {zones.map((z) => <option value={z}>{z}</option>)}
            </select>
          </label>
        }
      >
        {t('market.title')}
      </PageTitle>
      {msg && <p role="status" class="notice">{msg}</p>}
      <ul class="cards" aria-label={t('market.offers')}>
        {shown.map((o) => {
          const name = o.gpu_model ?? t('market.no_gpu');
          const soldOut = o.gpu_model !== null && (o.gpus_free ?? 0) === 0;
          const href = `/create?zone=${encodeURIComponent(o.zone)}&gpu=${encodeURIComponent(o.gpu_model ?? '')}`;
          return (
            <li class="card offer" key={o.zone + name} aria-label={`${name} · ${o.zone}`}>
              <h2>
                {name} {o.simulated && <span class="tag">{t('market.simulated')}</span>}
              </h2>
              <p class="muted">{o.zone}</p>
              {o.gpu_model ? (
                <dl class="facts">
                  <dt>{t('market.gpu_memory')}</dt><dd>{o.gpu_memory_gib} GiB</dd>
                  <dt>{t('market.free')}</dt><dd class="free-count">{o.gpus_free} / {o.gpus_total}</dd>
                  <dt>{t('market.max_per_instance')}</dt><dd>{o.max_gpus_per_instance}</dd>
                  <dt>{t('market.per_gpu')}</dt><dd>{o.cpu_per_gpu} {t('common.cpu_unit')} · {o.memory_gib_per_gpu} GiB</dd>
                  <dt>{t('market.price_hour')}</dt><dd>{formatFen(o.price_per_gpu_hour)}</dd>
                  <dt>{t('market.price_week')}</dt><dd>{formatFen(o.price_per_gpu_week)}</dd>
                  <dt>{t('market.price_month')}</dt><dd>{formatFen(o.price_per_gpu_month)}</dd>
                </dl>
              ) : (
                <dl class="facts">
                  <dt>{t('market.size')}</dt><dd>{o.cpu} {t('common.cpu_unit')} · {o.memory_gib} GiB</dd>
                  <dt>{t('market.price_hour')}</dt><dd>{formatFen(o.price_per_hour)}</dd>
                </dl>
              )}
              <div class="card-actions">
                {soldOut ? (
                  <>
                    <span class="tag sold-out">{t('market.sold_out')}</span>
                    {watches.data && (
                      <button type="button" onClick={() => toggleWatch(o)} aria-pressed={!!watchOf(o)}>
                        {watchOf(o) ? t('market.notify_cancel') : t('market.notify_me')}
                      </button>
                    )}
                  </>
                ) : (
                  <Link href={href} class="button primary" aria-label={t('market.rent_named', { model: name, zone: o.zone })}>
                    {t('market.rent')}
                  </Link>
                )}
              </div>
            </li>
          );
        })}
      </ul>
    </section>
  );
}
