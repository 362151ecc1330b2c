// One instance: overview (charts over 1h/6h/24h/7d, why idle or busy, events, disks, ports),
// and tabs for the terminal, Jupyter and the instance's web services. Loaded on demand.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { getInstance, jupyterPath, metrics, proxyPath, type Series } from '../../api/instances';
import { listDisks } from '../../api/disks';
import { recentEvents, subscribe } from '../../api/events';
import type { Disk, Event, Instance } from '../../api/types';
import { formatFen } from '../../lib/money';
import { formatDuration, formatTime } from '../../lib/time';
import { navigate } from '../../lib/router';
import { Badge, CopyButton, eventText, idleWhy, Loading, PageTitle, useLoad } from '../../components/ui';
import { Link } from '../../app';
import { InstanceActions } from './actions/InstanceActions';
import { InstanceTerminal } from './InstanceTerminal';
import { Chart } from './Chart';

const RANGES = [['1h', '1h'], ['6h', '6h'], ['24h', '24h'], ['7d', '168h']] as const;

function Charts({ inst }: { inst: Instance }) {
  const [range, setRange] = useState<string>('1h');
  const since = RANGES.find((r) => r[0] === range)![1];
  const data = useLoad(() => metrics(inst.id, since), [range]);
  const charts = useMemo(() => {
    const series: Series[] = data.data?.series ?? [];
    const group = (name: string, scale = 1) => {
      const ss = series.filter((s) => s.name === name);
      const xs = [...new Set(ss.flatMap((s) => s.points.map((p) => Number(p[0]))))].sort((a, b) => a - b);
      return {
        x: xs,
        series: ss.map((s) => {
          const m = new Map(s.points.map((p) => [Number(p[0]), p[1] / scale]));
          return { label: s.gpu !== undefined && s.gpu !== null ? `GPU ${s.gpu}` : name, values: xs.map((x) => m.get(x) ?? null) };
        }),
      };
    };
    const GiB = 1024 ** 3;
    return {
      gpuUtil: group('gpu_util_percent'),
      gpuMem: group('gpu_memory_used_bytes', GiB),
      cpu: group('cpu_percent'),
      mem: group('memory_used_bytes', GiB),
    };
  }, [data.data]);
  return (
    <section aria-labelledby="charts-h">
      <div class="row">
        <h2 id="charts-h">{t('detail.metrics')}</h2>
        <div role="group" aria-label={t('detail.range')} class="segmented">
          {RANGES.map(([label]) => (
            <button type="button" class="small" aria-pressed={range === label} onClick={() => setRange(label)}>{label}</button>
          ))}
        </div>
      </div>
      {(data.data as any)?.gpu_metrics?.reason && <p class="muted">{t('detail.no_gpu_metrics', { reason: idleWhy((data.data as any).gpu_metrics.reason) })}</p>}
      {!data.data ? <Loading error={data.error} /> : (
        <div class="charts">
          {charts.gpuUtil.series.length > 0 && <Chart title={t('detail.gpu_util')} unit="%" {...charts.gpuUtil} />}
          {charts.gpuMem.series.length > 0 && <Chart title={t('detail.gpu_mem')} unit=" GiB" {...charts.gpuMem} />}
          <Chart title={t('detail.cpu')} unit="%" {...charts.cpu} />
          <Chart title={t('detail.memory')} unit=" GiB" {...charts.mem} />
        </div>
      )}
    </section>
  );
}

function Overview({ inst, disks, events }: { inst: Instance; disks: Disk[]; events: Event[] }) {
  const a = inst.autostop as any;
  return (
    <div class="detail-grid">
      <section class="card" aria-labelledby="facts-h">
        <h2 id="facts-h">{t('detail.summary')}</h2>
        <dl class="facts">
          <dt>{t('instances.state')}</dt><dd><Badge state={inst.state} /> {inst.state_reason && <span class="muted">{inst.state_reason}</span>}</dd>
          <dt>{t('instances.gpu')}</dt><dd>{inst.gpu_model && !inst.no_gpu ? `${inst.gpu_model} × ${inst.gpu_count}` : t('market.no_gpu')}{(inst as any).simulated ? ` (${t('market.simulated')})` : ''}</dd>
          <dt>{t('detail.size')}</dt><dd>{inst.cpu} {t('common.cpu_unit')} · {inst.memory_gib} GiB · {t('detail.system_disk_n', { n: inst.system_disk_gib })}</dd>
          <dt>{t('detail.image')}</dt><dd>{(inst as any).image_name ?? inst.image}</dd>
          <dt>{t('instances.run_time')}</dt><dd>{formatDuration(inst.run_seconds)}</dd>
          <dt>{t('instances.charged')}</dt><dd>{formatFen(inst.charged)}</dd>
          <dt>{t('detail.billing')}</dt>
          <dd>
            {t(`billing.mode.${inst.billing.mode}` as any)} · {formatFen(inst.billing.price_per_hour)}{t('common.per_hour_suffix')}
            {inst.billing.expires_at && <> · {t('detail.expires', { time: formatTime(inst.billing.expires_at) })}</>}
          </dd>
          {inst.state === 'stopped' && inst.release_at && (<><dt>{t('detail.release_at')}</dt><dd>{formatTime(inst.release_at)}</dd></>)}
          <dt>{t('detail.created')}</dt><dd>{formatTime(inst.created_at)}</dd>
          {inst.ssh && (
            <>
              <dt>{t('instances.ssh')}</dt>
              <dd class="ssh"><code class="ssh-command">{inst.ssh.command}</code> <CopyButton text={inst.ssh.command} label={t('instances.copy_ssh_named', { name: inst.name })} /></dd>
            </>
          )}
        </dl>
      </section>
      <section class="card" aria-labelledby="idle-h">
        <h2 id="idle-h">{t('detail.idle_title')}</h2>
        {!a ? <p class="muted">{t('detail.autostop_off')}</p> : (
          <dl class="facts">
            <dt>{t('detail.autostop_rule')}</dt><dd>{t('detail.autostop_desc', { min: a.idle_minutes, pct: a.gpu_util_below_percent })}</dd>
            <dt>{t('detail.now')}</dt>
            <dd>{a.busy_reason ? t('detail.busy', { reason: a.busy_reason }) : a.idle_since ? t('detail.idle_since', { time: formatTime(a.idle_since) }) : t('detail.no_readings')}</dd>
            {a.idle_reason && (<><dt>{t('detail.idle_reading')}</dt><dd>{a.idle_reason}</dd></>)}
            {a.stops_at && (<><dt>{t('detail.stops_at')}</dt><dd>{formatTime(a.stops_at)}</dd></>)}
          </dl>
        )}
        {inst.spend_limit && <p>{t('detail.spend_limit', { limit: formatFen(inst.spend_limit), used: formatFen(inst.charged) })}</p>}
      </section>
      <section class="card" aria-labelledby="ports-h">
        <h2 id="ports-h">{t('detail.ports')}</h2>
        <table class="table">
          <thead><tr><th scope="col">{t('detail.port')}</th><th scope="col">{t('detail.reach')}</th><th scope="col">{t('detail.allowed')}</th></tr></thead>
          <tbody>
            {inst.ports.map((p) => (
              <tr>
                <td>{p.port}/{p.protocol}</td>
                <td>
                  {p.host_port ? <code>{p.host}:{p.host_port}</code> : '—'}
                  {p.protocol === 'tcp' && p.port !== 22 && inst.state === 'running' && (
                    <> · <a href={proxyPath(inst.id, p.port)} target="_blank" rel="noopener">{t('detail.open_proxy')}</a></>
                  )}
                </td>
                <td>{p.allowed ? t('detail.allowed_yes') : t('detail.allowed_no')}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
      <section class="card" aria-labelledby="disks-h">
        <h2 id="disks-h">{t('detail.disks')}</h2>
        <ul class="plain">
          <li>{t('detail.system_disk_n', { n: inst.system_disk_gib })}</li>
          {inst.data_disks.map((a) => {
            const d = disks.find((x) => x.id === a.id);
            return <li>{d?.name ?? a.id} · {a.mount_path} {d && `· ${d.size_gib} GiB`}</li>;
          })}
        </ul>
      </section>
      <section class="card wide" aria-labelledby="events-h">
        <h2 id="events-h">{t('detail.events')}</h2>
        <ul class="plain events">
          {events.map((e) => <li><time>{formatTime(e.time)}</time> {eventText(e)}</li>)}
        </ul>
      </section>
    </div>
  );
}

// Notebook starts a few seconds after the instance: ask it (GET .../jupyter/api) until it
// answers (a minute at most) before embedding it, rather than framing the proxy's 503.
function JupyterTab({ id }: { id: string }) {
  const [ready, setReady] = useState<'waiting' | 'up' | 'down'>('waiting');
  useEffect(() => {
    let live = true;
    const deadline = Date.now() + 60000;
    const probe = async () => {
      const ok = await fetch(jupyterPath(id) + 'api', { credentials: 'same-origin' }).then((r) => r.ok, () => false);
      if (!live) return;
      if (ok) setReady('up');
      else if (Date.now() > deadline) setReady('down');
      else setTimeout(probe, 1000);
    };
    probe();
    return () => {
      live = false;
    };
  }, [id]);
  return (
    <div class="jupyter">
      <p><a href={jupyterPath(id)} target="_blank" rel="noopener">{t('detail.open_jupyter')}</a></p>
      {ready === 'up' ? <iframe src={jupyterPath(id)} title={t('detail.tab_jupyter')} class="jupyter-frame" />
        : <p class="muted" role="status">{ready === 'waiting' ? t('detail.jupyter_starting') : t('detail.jupyter_down')}</p>}
    </div>
  );
}

export default function InstanceDetail({ id, tab = 'overview' }: { id: string; tab?: string }) {
  const inst = useLoad(() => getInstance(id), [id]);
  const disks = useLoad(() => listDisks(), [id]);
  const events = useLoad(() => recentEvents(id).catch(() => []), [id]);
  useEffect(
    () =>
      subscribe((e) => {
        if (e.resource !== id) return;
        inst.reload();
        events.setData((cur) => [e, ...(cur ?? [])].slice(0, 50));
      }),
    [id],
  );
  if (!inst.data) return <Loading error={inst.error} />;
  const i = inst.data;
  const tabs: [string, string][] = [['overview', t('detail.tab_overview')], ['terminal', t('detail.tab_terminal')], ['jupyter', t('detail.tab_jupyter')], ['services', t('detail.tab_services')]];
  return (
    <section>
      <PageTitle actions={<InstanceActions inst={i} disks={disks.data ?? []} onDone={inst.reload} />}>
        <Link href="/instances">{t('nav.instances')}</Link> / {i.name} <Badge state={i.state} />
      </PageTitle>
      <div role="tablist" aria-label={t('detail.tabs')} class="tabs">
        {tabs.map(([k, label]) => (
          <button type="button" role="tab" aria-selected={tab === k} onClick={() => navigate(k === 'overview' ? `/instances/${id}` : `/instances/${id}/${k}`)}>
            {label}
          </button>
        ))}
      </div>
      <div role="tabpanel">
        {tab === 'overview' && (
          <>
            <Overview inst={i} disks={disks.data ?? []} events={events.data ?? []} />
            <Charts inst={i} />
          </>
        )}
        {tab === 'terminal' && (i.state === 'running' ? <InstanceTerminal id={i.id} /> : <p class="muted">{t('detail.needs_running')}</p>)}
        {tab === 'jupyter' && (
          i.jupyter_url && i.state === 'running' ? <JupyterTab id={i.id} />
            : <p class="muted">{i.jupyter_url ? t('detail.needs_running') : t('detail.no_jupyter')}</p>
        )}
        {tab === 'services' && (
          <ul class="plain services">
            {i.ports.filter((p) => p.protocol === 'tcp' && p.port !== 22).map((p) => (
              <li>
                <a href={proxyPath(i.id, p.port)} target="_blank" rel="noopener">{t('detail.service_port', { port: p.port })}</a>
                <span class="muted"> · {proxyPath(i.id, p.port)}</span>
              </li>
            ))}
            {i.ports.filter((p) => p.protocol === 'tcp' && p.port !== 22).length === 0 && <li class="muted">{t('detail.no_services')}</li>}
          </ul>
        )}
      </div>
    </section>
  );
}
