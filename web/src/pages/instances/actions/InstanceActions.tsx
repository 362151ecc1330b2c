// One button per action the instance's state allows; each asks first, saying what is kept,
// what is deleted and what keeps billing (naming the data disks).
import { useState } from 'preact/hooks';
import { t } from '../../../i18n';
import type { Disk, Instance } from '../../../api/types';
import { releaseInstance, restartInstance, saveImage, startInstance, stopInstance } from '../../../api/instances';
import { allowedActions, type Action } from '../../../lib/state';
import { Dialog, errorText, Field } from '../../../components/ui';

function diskNames(inst: Instance, disks: Disk[]): string[] {
  return inst.data_disks.map((a) => {
    const d = disks.find((x) => x.id === a.id);
    return `${d?.name ?? a.id} (${a.mount_path}${d ? `, ${d.size_gib} GiB` : ''})`;
  });
}

function Explain({ action, inst, disks }: { action: Action; inst: Instance; disks: Disk[] }) {
  const names = diskNames(inst, disks);
  const keptDisks = inst.data_disks.filter((a) => !disks.find((x) => x.id === a.id)?.delete_on_release);
  const keptNames = diskNames({ ...inst, data_disks: keptDisks }, disks);
  const deletedNames = names.filter((n) => !keptNames.includes(n));
  const sub = inst.billing.mode !== 'hourly';
  const items: { label: string; text: string }[] = [];
  switch (action) {
    case 'stop':
    case 'restart':
      items.push({ label: t('confirm.kept'), text: t('confirm.kept_stop') + (names.length ? ' ' + t('confirm.disks_list', { list: names.join(', ') }) : '') });
      items.push({ label: t('confirm.deleted'), text: action === 'stop' ? t('confirm.deleted_stop') : t('confirm.deleted_none') });
      items.push({
        label: t('confirm.billing'),
        text: action === 'stop'
          ? (sub ? t('confirm.billing_stop_sub') : t('confirm.billing_stop')) + (names.length ? ' ' + t('confirm.disks_bill', { list: names.join(', ') }) : '')
          : t('confirm.billing_restart'),
      });
      if (action === 'stop' && inst.release_after_stopped_days)
        items.push({ label: t('confirm.release_later'), text: t('confirm.release_after', { n: inst.release_after_stopped_days }) });
      break;
    case 'start':
    case 'start_no_gpu':
      items.push({ label: t('confirm.kept'), text: t('confirm.kept_start') });
      items.push({ label: t('confirm.deleted'), text: t('confirm.deleted_none') });
      items.push({ label: t('confirm.billing'), text: action === 'start' ? t('confirm.billing_start') : t('confirm.billing_start_no_gpu') });
      break;
    case 'release':
      items.push({ label: t('confirm.kept'), text: keptNames.length ? t('confirm.disks_kept_release', { list: keptNames.join(', ') }) : t('confirm.nothing_kept') });
      items.push({ label: t('confirm.deleted'), text: t('confirm.deleted_release') + (deletedNames.length ? ' ' + t('confirm.disks_list', { list: deletedNames.join(', ') }) : '') });
      items.push({ label: t('confirm.billing'), text: t('confirm.billing_release') + (keptNames.length ? ' ' + t('confirm.disks_bill', { list: keptNames.join(', ') }) : '') });
      break;
    case 'save_image':
      items.push({ label: t('confirm.kept'), text: t('confirm.kept_save') });
      items.push({ label: t('confirm.deleted'), text: t('confirm.deleted_none') });
      items.push({ label: t('confirm.billing'), text: t('confirm.billing_save') });
      break;
  }
  return (
    <dl class="explain">
      {items.map((i) => (<><dt>{i.label}</dt><dd>{i.text}</dd></>))}
    </dl>
  );
}

export function InstanceActions({ inst, disks, onDone }: { inst: Instance; disks: Disk[]; onDone: () => void }) {
  const [open, setOpen] = useState<Action | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [imageName, setImageName] = useState(`${inst.name}-image`);
  const actions = allowedActions(inst.state, !!inst.gpu_model && inst.gpu_count > 0);
  const run = async () => {
    setBusy(true);
    setError(null);
    try {
      if (open === 'stop') await stopInstance(inst.id);
      else if (open === 'start') await startInstance(inst.id, false);
      else if (open === 'start_no_gpu') await startInstance(inst.id, true);
      else if (open === 'restart') await restartInstance(inst.id);
      else if (open === 'release') await releaseInstance(inst.id);
      else if (open === 'save_image') await saveImage(inst.id, imageName, '');
      setOpen(null);
      onDone();
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="row-actions">
      {actions.map((a) => (
        <button type="button" class={'small' + (a === 'release' ? ' danger' : '')} onClick={() => (setError(null), setOpen(a))}
          aria-label={t(`action.${a}_named`, { name: inst.name })}>
          {t(`action.${a}`)}
        </button>
      ))}
      {open && (
        <Dialog
          title={t(`action.${open}_title`, { name: inst.name })}
          confirmLabel={t(`action.${open}`)}
          danger={open === 'release' || open === 'stop'}
          busy={busy}
          error={error}
          onConfirm={run}
          onCancel={() => setOpen(null)}
          canConfirm={open !== 'save_image' || /^[a-z][a-z0-9-]{0,62}$/.test(imageName)}
        >
          <Explain action={open} inst={inst} disks={disks} />
          {open === 'save_image' && (
            <Field label={t('action.image_name')}>
              {(id) => <input id={id} value={imageName} onInput={(e) => setImageName((e.target as HTMLInputElement).value)} />}
            </Field>
          )}
        </Dialog>
      )}
    </div>
  );
}
