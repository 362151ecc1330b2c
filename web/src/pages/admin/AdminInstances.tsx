import { useEffect, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { listAllInstances } from '../../api/admin';
import { listDisks } from '../../api/disks';
import type { Disk } from '../../api/types';
import { Empty, Loading, PageTitle } from '../../components/ui';
import { InstanceRows, useLiveInstances } from '../instances/InstanceList';

export function AdminInstances() {
  const { list, error, reload } = useLiveInstances(listAllInstances);
  const [disks, setDisks] = useState<Disk[]>([]);
  useEffect(() => {
    listDisks().then(setDisks, () => {});
  }, []);
  const shown = list?.filter((i) => i.state !== 'released');
  return (
    <section>
      <PageTitle>{t('nav.all_instances')}</PageTitle>
      {!shown ? <Loading error={error} /> : shown.length === 0 ? <Empty text={t('instances.none')} /> : <InstanceRows list={shown} disks={disks} onChanged={reload} showOwner />}
    </section>
  );
}
