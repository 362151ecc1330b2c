// Data disks, snapshots and the recycle bin (restore, days left).
import { useEffect, useState } from 'preact/hooks';
import { subscribe } from '../../api/events';
import { t } from '../../i18n';
import { createDisk, deleteDisk, listDisks, resizeDisk, restoreDisk, snapshotDisk } from '../../api/disks';
import { deleteSnapshot, listSnapshots, restoreSnapshot } from '../../api/snapshots';
import { listZones } from '../../api/market';
import { formatBytes } from '../../lib/money';
import { daysLeft, formatTime } from '../../lib/time';
import { Badge, Dialog, Empty, errorText, Field, Loading, PageTitle, useLoad } from '../../components/ui';

// When a deleted item is destroyed for good: the API's purge_at (deleted_at + [policy]
// recycle_days, computed by the server); null when it does not say (not in the bin).
export function purgeAt(item: { deleted_at?: string | null; purge_at?: string | null }): string | null {
  return item.purge_at ?? null;
}

async function loadAll() {
  const [disks, snapshots, binDisks, binSnapshots, zones] = await Promise.all([
    listDisks(), listSnapshots(), listDisks('deleted'), listSnapshots('deleted'), listZones(),
  ]);
  return { disks, snapshots, binDisks, binSnapshots, zones };
}

type Pending = { title: string; body: string; label: string; danger?: boolean; run: () => Promise<unknown> };

export function Disks() {
  const data = useLoad(loadAll);
  const [pending, setPending] = useState<Pending | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [name, setName] = useState('');
  const [size, setSize] = useState(20);
  const [zone, setZone] = useState('');
  const [createError, setCreateError] = useState<string | null>(null);
  // Disks and snapshots change state on the host (creating -> available): follow their events.
  useEffect(() => subscribe((e) => (e.type.startsWith('disk.') || e.type.startsWith('snapshot.')) && data.reload()), []);
  if (!data.data) return <Loading error={data.error} />;
  const d = data.data;
  const act = async () => {
    if (!pending) return;
    setBusy(true);
    setError(null);
    try {
      await pending.run();
      setPending(null);
      data.reload();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  const create = async (e: Event) => {
    e.preventDefault();
    setCreateError(null);
    try {
      await createDisk(name, zone || d.zones[0]?.name, size);
      setName('');
      data.reload();
    } catch (err) {
      setCreateError(errorText(err));
    }
  };
  return (
    <section>
      <PageTitle>{t('disks.title')}</PageTitle>
      <form class="card inline-form" onSubmit={create} aria-label={t('disks.new')}>
        <Field label={t('disks.name')}>{(id) => <input id={id} required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />}</Field>
        <Field label={t('create.zone')}>
          {(id) => <select id={id} value={zone} onChange={(e) => setZone((e.target as HTMLSelectElement).value)}>{d.zones.map((z) => <option value={z.name}>{z.name}</option>)}</select>}
        </Field>
        <Field label={t('disks.size')}>{(id) => <input id={id} type="number" min={1} value={size} onInput={(e) => setSize(Number((e.target as HTMLInputElement).value))} />}</Field>
        <button type="submit" class="primary">{t('disks.create')}</button>
        {createError && <p class="error" role="alert">{createError}</p>}
      </form>
      <h2>{t('disks.data_disks')}</h2>
      {d.disks.length === 0 ? <Empty text={t('disks.none')} /> : (
        <table class="table">
          <thead><tr><th scope="col">{t('disks.name')}</th><th scope="col">{t('instances.state')}</th><th scope="col">{t('disks.size')}</th><th scope="col">{t('disks.used')}</th><th scope="col">{t('disks.attached_to')}</th><th scope="col">{t('instances.actions')}</th></tr></thead>
          <tbody>
            {d.disks.map((x) => (
              <tr aria-label={x.name}>
                <td data-label={t('disks.name')}>{x.name}<div class="muted small">{x.zone}</div></td>
                <td data-label={t('instances.state')}><Badge state={x.state} /></td>
                <td data-label={t('disks.size')}>{x.size_gib} GiB</td>
                <td data-label={t('disks.used')}>{formatBytes(x.used_bytes)}</td>
                <td data-label={t('disks.attached_to')}>{x.instance ? `${x.instance} · ${x.mount_path}` : '—'}</td>
                <td data-label={t('instances.actions')} class="row-actions">
                  <button type="button" class="small" aria-label={t('disks.snapshot_named', { name: x.name })} onClick={() => setPending({
                    title: t('disks.snapshot_named', { name: x.name }), body: t('disks.snapshot_explain'), label: t('disks.snapshot'),
                    run: () => snapshotDisk(x.id, `${x.name}-${new Date().toISOString().slice(0, 10).replace(/-/g, '')}-${Math.random().toString(36).slice(2, 5)}`),
                  })}>{t('disks.snapshot')}</button>
                  <button type="button" class="small" aria-label={t('disks.grow_named', { name: x.name })} onClick={() => setPending({
                    title: t('disks.grow_named', { name: x.name }), body: t('disks.grow_explain', { from: x.size_gib, to: x.size_gib * 2 }), label: t('disks.grow'),
                    run: () => resizeDisk(x.id, x.size_gib * 2),
                  })}>{t('disks.grow')}</button>
                  {!x.instance && (
                    <button type="button" class="small danger" aria-label={t('disks.delete_named', { name: x.name })} onClick={() => setPending({
                      title: t('disks.delete_named', { name: x.name }), body: t('disks.delete_explain'), label: t('common.delete'), danger: true,
                      run: () => deleteDisk(x.id),
                    })}>{t('common.delete')}</button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>{t('disks.snapshots')}</h2>
      {d.snapshots.length === 0 ? <Empty text={t('disks.no_snapshots')} /> : (
        <table class="table">
          <thead><tr><th scope="col">{t('disks.name')}</th><th scope="col">{t('disks.disk')}</th><th scope="col">{t('instances.state')}</th><th scope="col">{t('disks.used')}</th><th scope="col">{t('detail.created')}</th><th scope="col">{t('instances.actions')}</th></tr></thead>
          <tbody>
            {d.snapshots.map((s) => (
              <tr aria-label={s.name}>
                <td data-label={t('disks.name')}>{s.name}</td>
                <td data-label={t('disks.disk')}>{s.disk}</td>
                <td data-label={t('instances.state')}><Badge state={s.state} /></td>
                <td data-label={t('disks.used')}>{formatBytes(s.used_bytes)}</td>
                <td data-label={t('detail.created')}>{formatTime(s.created_at)}</td>
                <td data-label={t('instances.actions')}>
                  <button type="button" class="small danger" aria-label={t('disks.delete_named', { name: s.name })} onClick={() => setPending({
                    title: t('disks.delete_named', { name: s.name }), body: t('disks.delete_explain'), label: t('common.delete'), danger: true,
                    run: () => deleteSnapshot(s.id),
                  })}>{t('common.delete')}</button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>{t('disks.recycle_bin')}</h2>
      <p class="muted">{t('disks.recycle_explain')}</p>
      {d.binDisks.length + d.binSnapshots.length === 0 ? <Empty text={t('disks.bin_empty')} /> : (
        <table class="table">
          <thead><tr><th scope="col">{t('disks.name')}</th><th scope="col">{t('disks.kind')}</th><th scope="col">{t('disks.deleted_at')}</th><th scope="col">{t('disks.days_left')}</th><th scope="col">{t('instances.actions')}</th></tr></thead>
          <tbody>
            {[...d.binDisks.map((x) => ({ ...x, kind: 'disk' as const })), ...d.binSnapshots.map((x) => ({ ...x, kind: 'snapshot' as const }))].map((x) => (
              <tr aria-label={x.name}>
                <td data-label={t('disks.name')}>{x.name}</td>
                <td data-label={t('disks.kind')}>{t(x.kind === 'disk' ? 'disks.kind_disk' : 'disks.kind_snapshot')}</td>
                <td data-label={t('disks.deleted_at')}>{formatTime(x.deleted_at)}</td>
                <td data-label={t('disks.days_left')}>{daysLeft(purgeAt(x)) ?? '—'}</td>
                <td data-label={t('instances.actions')}>
                  <button type="button" class="small" aria-label={t('disks.restore_named', { name: x.name })} onClick={() => setPending({
                    title: t('disks.restore_named', { name: x.name }), body: t('disks.restore_explain'), label: t('disks.restore'),
                    run: () => (x.kind === 'disk' ? restoreDisk(x.id) : restoreSnapshot(x.id)),
                  })}>{t('disks.restore')}</button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {pending && (
        <Dialog title={pending.title} confirmLabel={pending.label} danger={pending.danger} busy={busy} error={error} onConfirm={act} onCancel={() => setPending(null)}>
          <p>{pending.body}</p>
        </Dialog>
      )}
    </section>
  );
}
