// Operator: hosts with a GPU grid (free, used, reserved, lost; simulated labelled).
import { t } from '../../i18n';
import { listHosts } from '../../api/admin';
import type { Host } from '../../api/types';
import { formatTime } from '../../lib/time';
import { Badge, Empty, Loading, PageTitle, useLoad } from '../../components/ui';

export function gpuStatus(g: Host['gpus'][number]): 'free' | 'used' | 'reserved' | 'lost' {
  if (g.health && g.health !== 'ok') return 'lost';
  if (g.instance) return 'used';
  if (g.reserved_by) return 'reserved';
  return 'free';
}

export function Hosts() {
  const data = useLoad(listHosts);
  if (!data.data) return <Loading error={data.error} />;
  return (
    <section>
      <PageTitle>{t('hosts.title')}</PageTitle>
      <ul class="legend" aria-label={t('hosts.legend')}>
        {(['free', 'used', 'reserved', 'lost'] as const).map((s) => <li><span class={`gpu gpu-${s}`} aria-hidden="true" /> {t(`hosts.gpu_${s}`)}</li>)}
      </ul>
      {data.data.length === 0 ? <Empty text={t('hosts.none')} /> : data.data.map((h) => (
        <article class="card" aria-label={h.name}>
          <div class="row">
            <h2>{h.name}</h2>
            <Badge state={h.state} />
            {h.simulated && <span class="tag">{t('market.simulated')}</span>}
            <span class="muted">{h.zone} · {h.cpu} {t('common.cpu_unit')} · {h.memory_gib} GiB · {t('hosts.last_seen', { time: formatTime(h.last_seen) })}</span>
          </div>
          <ul class="gpu-grid" aria-label={t('hosts.gpus_of', { name: h.name })}>
            {h.gpus.map((g) => {
              const s = gpuStatus(g);
              return (
                <li class={`gpu gpu-${s}`} title={`${g.model} #${g.index}`} aria-label={`${g.model} #${g.index}: ${t(`hosts.gpu_${s}`)}${g.instance ? ` (${g.instance})` : ''}`}>
                  <span>#{g.index}</span>
                  <small>{t(`hosts.gpu_${s}`)}</small>
                </li>
              );
            })}
          </ul>
        </article>
      ))}
    </section>
  );
}
