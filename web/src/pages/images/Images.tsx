// Images: the public market with descriptions and versions; the user's own with size and cost;
// deleted own images in the recycle bin.
import { useState } from 'preact/hooks';
import { t } from '../../i18n';
import { deleteImage, listImages, restoreImage } from '../../api/images';
import type { Image } from '../../api/types';
import { formatBytes } from '../../lib/money';
import { daysLeft, formatTime } from '../../lib/time';
import { Badge, Dialog, Empty, errorText, Loading, PageTitle, useLoad } from '../../components/ui';
import { purgeAt } from '../disks/Disks';
import { Link } from '../../app';

function versions(i: Image) {
  return [i.os, i.python && `Python ${i.python}`, i.cuda && `CUDA ${i.cuda}`, ...Object.entries(i.frameworks ?? {}).map(([k, v]) => `${k} ${v}`)]
    .filter(Boolean)
    .join(' · ');
}

export function Images() {
  const data = useLoad(() => Promise.all([listImages(), listImages('deleted').catch(() => [])]));
  const [pending, setPending] = useState<{ img: Image; restore: boolean } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  if (!data.data) return <Loading error={data.error} />;
  const [all, bin] = data.data;
  const pub = all.filter((i) => i.visibility === 'public');
  const own = all.filter((i) => i.visibility !== 'public');
  const run = async () => {
    if (!pending) return;
    setBusy(true);
    try {
      if (pending.restore) await restoreImage(pending.img.id);
      else await deleteImage(pending.img.id);
      setPending(null);
      data.reload();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <section>
      <PageTitle>{t('images.title')}</PageTitle>
      <h2>{t('images.public')}</h2>
      <ul class="cards">
        {pub.map((i) => (
          <li class="card" aria-label={i.name}>
            <h3>{i.name}</h3>
            <p>{i.description}</p>
            <p class="muted small">{versions(i)}</p>
            <p class="muted small">{formatBytes(i.size_bytes)}{i.ssh === false ? ' · ' + t('images.no_ssh') : ''}</p>
            <Link href="/create" class="button">{t('images.use')}</Link>
          </li>
        ))}
      </ul>
      <h2>{t('images.own_title')}</h2>
      {own.length === 0 ? <Empty text={t('images.none_own')} /> : (
        <table class="table">
          <thead><tr><th scope="col">{t('disks.name')}</th><th scope="col">{t('instances.state')}</th><th scope="col">{t('images.size')}</th><th scope="col">{t('images.billed_size')}</th><th scope="col">{t('detail.created')}</th><th scope="col">{t('instances.actions')}</th></tr></thead>
          <tbody>
            {own.map((i) => (
              <tr aria-label={i.name}>
                <td data-label={t('disks.name')}>{i.name}<div class="muted small">{versions(i)}</div></td>
                <td data-label={t('instances.state')}><Badge state={i.state} /></td>
                <td data-label={t('images.size')}>{formatBytes(i.size_bytes)}</td>
                <td data-label={t('images.billed_size')}>{formatBytes((i as any).own_size_bytes ?? null)}</td>
                <td data-label={t('detail.created')}>{formatTime(i.created_at)}</td>
                <td data-label={t('instances.actions')}>
                  <button type="button" class="small danger" aria-label={t('disks.delete_named', { name: i.name })} onClick={() => (setError(null), setPending({ img: i, restore: false }))}>{t('common.delete')}</button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <p class="muted small">{t('images.cost_note')}</p>
      <h2>{t('disks.recycle_bin')}</h2>
      {bin.length === 0 ? <Empty text={t('disks.bin_empty')} /> : (
        <ul class="plain">
          {bin.map((i) => (
            <li>
              {i.name} · {t('disks.days_left')}: {daysLeft(purgeAt(i)) ?? '—'}{' '}
              <button type="button" class="small" aria-label={t('disks.restore_named', { name: i.name })} onClick={() => (setError(null), setPending({ img: i, restore: true }))}>{t('disks.restore')}</button>
            </li>
          ))}
        </ul>
      )}
      {pending && (
        <Dialog
          title={pending.restore ? t('disks.restore_named', { name: pending.img.name }) : t('disks.delete_named', { name: pending.img.name })}
          confirmLabel={pending.restore ? t('disks.restore') : t('common.delete')}
          danger={!pending.restore}
          busy={busy}
          error={error}
          onConfirm={run}
          onCancel={() => setPending(null)}
        >
          <p>{pending.restore ? t('images.restore_explain') : t('images.delete_explain')}</p>
        </Dialog>
      )}
    </section>
  );
}
