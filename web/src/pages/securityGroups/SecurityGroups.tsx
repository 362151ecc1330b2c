// Security groups with a rule editor. A rule opening every port to everyone needs the user's
// worded acknowledgement (sent as acknowledge_risk: true).
import { useState } from 'preact/hooks';
import { t } from '../../i18n';
import { createGroup, deleteGroup, isAllOpen, listGroups, updateGroup, widelyOpen } from '../../api/securityGroups';
import { ApiError } from '../../api/client';
import type { Rule, SecurityGroup } from '../../api/types';
import { Empty, errorText, Field, Loading, PageTitle, useLoad } from '../../components/ui';

function RuleEditor({ group, onSaved, onCancel }: { group: SecurityGroup | null; onSaved: () => void; onCancel: () => void }) {
  const [name, setName] = useState(group?.name ?? '');
  const [description, setDescription] = useState(group?.description ?? '');
  const [rules, setRules] = useState<Rule[]>(group?.rules.map((r) => ({ ...r })) ?? [{ protocol: 'tcp', port_min: 22, port_max: 22, source: '0.0.0.0/0' }]);
  const [ack, setAck] = useState(false);
  const [error, setError] = useState<string | null>(null);
  // The server's word wins: a refusal that asks for acknowledge_risk shows the box too.
  const [serverAsks, setServerAsks] = useState(false);
  const risky = widelyOpen(rules) || serverAsks;
  const update = (i: number, p: Partial<Rule>) => setRules(rules.map((r, j) => (j === i ? { ...r, ...p } : r)));
  const save = async (e: Event) => {
    e.preventDefault();
    setError(null);
    try {
      if (group) await updateGroup(group.id, rules, risky && ack);
      else await createGroup(name, description, rules, risky && ack);
      onSaved();
    } catch (err) {
      if (err instanceof ApiError && /acknowledge_risk/.test(err.detail) && !(risky && ack)) setServerAsks(true);
      setError(errorText(err));
    }
  };
  return (
    <form class="card" onSubmit={save} aria-label={group ? t('sg.edit_named', { name: group.name }) : t('sg.new')}>
      <h2>{group ? t('sg.edit_named', { name: group.name }) : t('sg.new')}</h2>
      {!group && (
        <>
          <Field label={t('sg.name')}>{(id) => <input id={id} required value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />}</Field>
          <Field label={t('sg.description')}>{(id) => <input id={id} value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />}</Field>
        </>
      )}
      <table class="table rules">
        <thead><tr><th scope="col">{t('sg.protocol')}</th><th scope="col">{t('sg.port_min')}</th><th scope="col">{t('sg.port_max')}</th><th scope="col">{t('sg.source')}</th><th scope="col">{t('sg.rule_description')}</th><th scope="col"><span class="sr-only">{t('instances.actions')}</span></th></tr></thead>
        <tbody>
          {rules.map((r, i) => (
            <tr>
              <td><select aria-label={t('sg.protocol_n', { n: i + 1 })} value={r.protocol} onChange={(e) => update(i, { protocol: (e.target as HTMLSelectElement).value as any })}><option value="tcp">TCP</option><option value="udp">UDP</option></select></td>
              <td><input aria-label={t('sg.port_min_n', { n: i + 1 })} type="number" min={1} max={65535} value={r.port_min} onInput={(e) => update(i, { port_min: Number((e.target as HTMLInputElement).value) })} /></td>
              <td><input aria-label={t('sg.port_max_n', { n: i + 1 })} type="number" min={1} max={65535} value={r.port_max} onInput={(e) => update(i, { port_max: Number((e.target as HTMLInputElement).value) })} /></td>
              <td><input aria-label={t('sg.source_n', { n: i + 1 })} value={r.source} onInput={(e) => update(i, { source: (e.target as HTMLInputElement).value })} /></td>
              <td><input aria-label={t('sg.rule_description_n', { n: i + 1 })} value={r.description ?? ''} onInput={(e) => update(i, { description: (e.target as HTMLInputElement).value })} /></td>
              <td><button type="button" class="small" aria-label={t('sg.remove_rule_n', { n: i + 1 })} onClick={() => setRules(rules.filter((_, j) => j !== i))}>{t('common.remove')}</button></td>
            </tr>
          ))}
        </tbody>
      </table>
      <div class="row">
        <button type="button" onClick={() => setRules([...rules, { protocol: 'tcp', port_min: 8888, port_max: 8888, source: '0.0.0.0/0' }])}>{t('sg.add_rule')}</button>
        <button type="button" onClick={() => setRules([...rules, { protocol: 'tcp', port_min: 1, port_max: 65535, source: '0.0.0.0/0', description: 'all open' }])}>{t('sg.add_all_open')}</button>
      </div>
      {risky && (
        <div class="warning" role="alert">
          <p>{t('sg.risk_text')}</p>
          <label class="check"><input type="checkbox" checked={ack} onChange={(e) => setAck((e.target as HTMLInputElement).checked)} />{t('sg.risk_ack')}</label>
        </div>
      )}
      {error && <p class="error" role="alert">{error}</p>}
      <div class="row">
        <button type="button" onClick={onCancel}>{t('common.cancel')}</button>
        <button type="submit" class="primary" disabled={risky && !ack}>{t('common.save')}</button>
      </div>
    </form>
  );
}

export function SecurityGroups() {
  const data = useLoad(listGroups);
  const [editing, setEditing] = useState<SecurityGroup | 'new' | null>(null);
  const [error, setError] = useState<string | null>(null);
  if (!data.data) return <Loading error={data.error} />;
  const done = () => (setEditing(null), data.reload());
  return (
    <section>
      <PageTitle actions={<button type="button" class="primary" onClick={() => setEditing('new')}>{t('sg.new')}</button>}>{t('sg.title')}</PageTitle>
      {editing && <RuleEditor key={editing === 'new' ? 'new' : editing.id} group={editing === 'new' ? null : editing} onSaved={done} onCancel={() => setEditing(null)} />}
      {error && <p class="error" role="alert">{error}</p>}
      {data.data.length === 0 ? <Empty text={t('sg.none')} /> : data.data.map((g) => (
        <article class="card" aria-label={g.name}>
          <div class="row">
            <h2>{g.name}</h2>
            <span class="muted">{g.description}</span>
            <div class="spacer" />
            <button type="button" class="small" aria-label={t('sg.edit_named', { name: g.name })} onClick={() => setEditing(g)}>{t('common.edit')}</button>
            {!(g as any).is_default && (
              <button type="button" class="small danger" aria-label={t('disks.delete_named', { name: g.name })}
                onClick={() => deleteGroup(g.id).then(data.reload, (e) => setError(errorText(e)))}>{t('common.delete')}</button>
            )}
          </div>
          <ul class="plain">
            {g.rules.map((r) => (
              <li>{r.protocol.toUpperCase()} {r.port_min === r.port_max ? r.port_min : `${r.port_min}-${r.port_max}`} ← {r.source}{r.description ? ` · ${r.description}` : ''}{isAllOpen(r) && <span class="tag warn"> {t('sg.all_open')}</span>}</li>
            ))}
            {g.rules.length === 0 && <li class="muted">{t('sg.no_rules')}</li>}
          </ul>
          {(g as any).instances?.length > 0 && <p class="muted small">{t('sg.used_by', { list: (g as any).instances.join(', ') })}</p>}
        </article>
      ))}
    </section>
  );
}
