import { useState } from 'preact/hooks';
import { t } from '../../i18n';
import { addKey, deleteKey, listKeys } from '../../api/sshKeys';
import { Empty, errorText, Field, Loading, PageTitle, useLoad } from '../../components/ui';
import { formatTime } from '../../lib/time';

export function SshKeys() {
  const data = useLoad(listKeys);
  const [name, setName] = useState('');
  const [key, setKey] = useState('');
  const [error, setError] = useState<string | null>(null);
  const add = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      await addKey(name, key.trim());
      setName('');
      setKey('');
      data.reload();
    } catch (err) {
      setError(errorText(err));
    }
  };
  return (
    <section>
      <PageTitle>{t('keys.title')}</PageTitle>
      <form class="card" onSubmit={add} aria-label={t('keys.add')}>
        <Field label={t('keys.name')}>{(id) => <input id={id} required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />}</Field>
        <Field label={t('keys.public_key')} hint={t('keys.hint')}>{(id) => <textarea id={id} required rows={3} value={key} onInput={(e) => setKey((e.target as HTMLTextAreaElement).value)} />}</Field>
        {error && <p class="error" role="alert">{error}</p>}
        <button type="submit" class="primary">{t('keys.add')}</button>
      </form>
      {!data.data ? <Loading error={data.error} /> : data.data.length === 0 ? <Empty text={t('keys.none')} /> : (
        <table class="table">
          <thead><tr><th scope="col">{t('keys.name')}</th><th scope="col">{t('keys.fingerprint')}</th><th scope="col">{t('detail.created')}</th><th scope="col">{t('instances.actions')}</th></tr></thead>
          <tbody>
            {data.data.map((k) => (
              <tr aria-label={k.name}>
                <td data-label={t('keys.name')}>{k.name}</td>
                <td data-label={t('keys.fingerprint')}><code>{k.fingerprint ?? k.public_key.slice(0, 40) + '…'}</code></td>
                <td data-label={t('detail.created')}>{formatTime(k.created_at)}</td>
                <td data-label={t('instances.actions')}><button type="button" class="small danger" aria-label={t('disks.delete_named', { name: k.name })} onClick={() => deleteKey(k.id).then(data.reload, (e) => setError(errorText(e)))}>{t('common.delete')}</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
