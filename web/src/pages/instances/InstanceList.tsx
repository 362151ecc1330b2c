// The instance list: badges follow the event stream (no polling), the SSH command with a
// copy button, run time, cost so far, and the actions.
import { useEffect, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { getInstance, listInstances } from '../../api/instances';
import { listDisks } from '../../api/disks';
import { subscribe } from '../../api/events';
import type { Disk, Instance } from '../../api/types';
import { applyEvent, stateFromEvent } from '../../lib/events';
import { formatFen } from '../../lib/money';
import { formatDuration, formatTime } from '../../lib/time';
import { Badge, CopyButton, Empty, Loading, PageTitle, usePaged } from '../../components/ui';
import { InstanceActions } from './actions/InstanceActions';
import { Link } from '../../app';

export function useLiveInstances(load: () => Promise<Instance[]>) {
  const [list, setList] = useState<Instance[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const reload = () =>
    load().then(
      (l) => (performance.mark('gpucloud:instances-data'), setList(l)),
      (e) => setError(String(e?.message ?? e)),
    );
  useEffect(() => {
    reload();
    return subscribe((e) => {
      if (!stateFromEvent(e)) return;
      setList((cur) => (cur ? applyEvent(cur, e) : cur));
      // The event carries the state; ports, the SSH command and the charge come with the row.
      getInstance(e.resource).then(
        (fresh) => setList((cur) => {
          if (!cur) return cur;
          const i = cur.findIndex((x) => x.id === fresh.id);
          if (i < 0) return fresh.state === 'released' ? cur : [fresh, ...cur];
          const next = cur.slice();
          next[i] = fresh;
          return next;
        }),
        () => {},
      );
    });
  }, []);
  return { list, error, reload, setList };
}

const matchInstance = (i: Instance, q: string) => i.name.toLowerCase().includes(q) || i.id.includes(q) || i.owner.toLowerCase().includes(q);

export function InstanceRows({ list: all, disks, onChanged, showOwner }: { list: Instance[]; disks: Disk[]; onChanged: () => void; showOwner?: boolean }) {
  const { rows: list, controls } = usePaged(all, matchInstance);
  return (
    <>
    {controls}
    <table class="table instances">
      <thead>
        <tr>
          <th scope="col">{t('instances.name')}</th>
          {showOwner && <th scope="col">{t('instances.owner')}</th>}
          <th scope="col">{t('instances.state')}</th>
          <th scope="col">{t('instances.gpu')}</th>
          <th scope="col">{t('instances.run_time')}</th>
          <th scope="col">{t('instances.charged')}</th>
          <th scope="col">{t('instances.ssh')}</th>
          <th scope="col">{t('instances.actions')}</th>
        </tr>
      </thead>
      <tbody>
        {list.map((i) => (
          <tr key={i.id} data-id={i.id} aria-label={i.name}>
            <td data-label={t('instances.name')}>
              <Link href={`/instances/${i.id}`}>{i.name}</Link>
              <div class="muted small">{i.zone}</div>
            </td>
            {showOwner && <td data-label={t('instances.owner')}>{i.owner}</td>}
            <td data-label={t('instances.state')}>
              <Badge state={i.state} />
              {i.state_reason && <div class="muted small">{i.state_reason}</div>}
              {i.state === 'stopped' && i.release_at && (
                <div class="muted small">{t('instances.released_at', { time: formatTime(i.release_at) })}</div>
              )}
            </td>
            <td data-label={t('instances.gpu')}>
              {i.gpu_model && !i.no_gpu ? `${i.gpu_model} × ${i.gpu_count}` : t('market.no_gpu')}
            </td>
            <td data-label={t('instances.run_time')}>{formatDuration(i.run_seconds)}</td>
            <td data-label={t('instances.charged')}>{formatFen(i.charged)}</td>
            <td data-label={t('instances.ssh')}>
              {i.ssh && i.state === 'running' ? (
                <div class="ssh">
                  <code class="ssh-command">{i.ssh.command}</code>
                  <CopyButton text={i.ssh.command} label={t('instances.copy_ssh_named', { name: i.name })} />
                </div>
              ) : (
                <span class="muted">—</span>
              )}
            </td>
            <td data-label={t('instances.actions')}>
              <InstanceActions inst={i} disks={disks} onDone={onChanged} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
    </>
  );
}

export function InstanceList() {
  const { list, error, reload } = useLiveInstances(listInstances);
  const [disks, setDisks] = useState<Disk[]>([]);
  useEffect(() => {
    listDisks().then(setDisks, () => {});
  }, [list?.length]);
  const shown = list?.filter((i) => i.state !== 'released');
  const rendered = !!shown;
  useEffect(() => {
    // For bench/console: the list's data arrived -> its rows are in the document.
    if (rendered) performance.mark('gpucloud:instances-rendered');
  }, [rendered]);
  return (
    <section>
      <PageTitle actions={<Link href="/create" class="button primary">{t('nav.create')}</Link>}>{t('instances.title')}</PageTitle>
      {!shown ? <Loading error={error} /> : shown.length === 0 ? <Empty text={t('instances.none')} /> : (
        <InstanceRows list={shown} disks={disks} onChanged={reload} />
      )}
    </section>
  );
}
