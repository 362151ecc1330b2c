// The create page: GPU and count (or none), billing mode, image, disks, security group and
// ports, access, cost control; a live estimate and the balance checked before submit. A
// refusal's detail is shown beside the field it names.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { t } from '../../i18n';
import { ApiError } from '../../api/client';
import { listOffers } from '../../api/market';
import { listImages } from '../../api/images';
import { listDisks } from '../../api/disks';
import { listGroups } from '../../api/securityGroups';
import { listKeys } from '../../api/sshKeys';
import { account } from '../../api/billing';
import { createInstance, estimate as apiEstimate } from '../../api/instances';
import type { Estimate } from '../../api/types';
import { createBody, estimateView, parsePorts, QUICK_PORTS, togglePort, type CreateForm } from '../../lib/estimate';
import { formatFen, parseYuan } from '../../lib/money';
import { navigate } from '../../lib/router';
import { errorText, Field, Loading, PageTitle, useLoad } from '../../components/ui';

const FIELDS = ['name', 'zone', 'gpu_model', 'gpu_count', 'image', 'system_disk_gib', 'data_disks', 'mount_path', 'size_gib',
  'security_group', 'ports', 'ssh_keys', 'password', 'billing', 'idle_minutes', 'autostop', 'spend_limit'];

function randomName() {
  return 'inst-' + Math.random().toString(36).slice(2, 7);
}

async function loadAll() {
  const [offers, images, disks, groups, keys, acct] = await Promise.all([
    listOffers(), listImages(), listDisks(), listGroups(), listKeys(), account(),
  ]);
  return { offers, images: images.filter((i) => i.state === 'available'), disks, groups, keys, acct };
}

export function CreateInstance() {
  const q = new URLSearchParams(location.search);
  const data = useLoad(loadAll);
  const [f, setF] = useState<CreateForm>({
    name: randomName(), zone: q.get('zone') ?? '', gpu_model: q.get('gpu') || null, gpu_count: 1,
    billing_mode: 'hourly', auto_renew: true, image: '', system_disk_gib: 30, disks: [], security_group: '',
    ports: [22], ssh_keys: [], password: '', idle_minutes: null, spend_limit_fen: null,
  });
  const [customPorts, setCustomPorts] = useState('');
  const [spendText, setSpendText] = useState('');
  const [est, setEst] = useState<Estimate | null>(null);
  const [estError, setEstError] = useState<string | null>(null);
  const [fieldErrors, setFieldErrors] = useState<Record<string, string>>({});
  const [formError, setFormError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const set = (patch: Partial<CreateForm>) => setF((x) => ({ ...x, ...patch }));

  useEffect(() => {
    const d = data.data;
    if (!d) return;
    setF((x) => ({
      ...x,
      zone: x.zone || d.offers[0]?.zone || '',
      image: x.image || d.images.find((i) => i.visibility === 'public')?.id || d.images[0]?.id || '',
      security_group: x.security_group || d.groups.find((g) => g.name === 'default')?.id || d.groups[0]?.id || '',
      ssh_keys: x.ssh_keys.length ? x.ssh_keys : d.keys.map((k) => k.id),
    }));
  }, [data.data]);

  const extra = parsePorts(customPorts);
  const allPorts = useMemo(() => [...new Set([...f.ports, ...(extra ?? [])])].sort((a, b) => a - b), [f.ports, customPorts]);
  const body = createBody({ ...f, ports: allPorts });
  const bodyKey = JSON.stringify({ ...body, name: undefined, password: undefined });

  useEffect(() => {
    if (!f.zone) return;
    const timer = setTimeout(() => {
      apiEstimate(body).then(
        (e) => (setEst(e), setEstError(null)),
        (e) => (setEst(null), setEstError(errorText(e))),
      );
    }, 250);
    return () => clearTimeout(timer);
  }, [bodyKey]);

  if (!data.data) return <Loading error={data.error} />;
  const d = data.data;
  const zones = [...new Set(d.offers.map((o) => o.zone))];
  const gpuOffers = d.offers.filter((o) => o.zone === f.zone && o.gpu_model);
  const offer = gpuOffers.find((o) => o.gpu_model === f.gpu_model);
  const image = d.images.find((i) => i.id === f.image);
  const freeDisks = d.disks.filter((x) => x.state === 'available' && (!f.zone || x.zone === f.zone));
  const view = est ? estimateView(est, f.billing_mode, d.acct.balance) : null;

  const submit = async (e: Event) => {
    e.preventDefault();
    setFieldErrors({});
    setFormError(null);
    if (extra === null) {
      setFieldErrors({ ports: t('create.bad_ports') });
      return;
    }
    if (spendText && parseYuan(spendText) === null) {
      setFieldErrors({ spend_limit: t('create.bad_amount') });
      return;
    }
    if (view && !view.enough) {
      setFormError(t('create.balance_short', { need: formatFen(view.needed), have: formatFen(d.acct.balance) }));
      return;
    }
    setBusy(true);
    try {
      const inst = await createInstance(body);
      navigate(`/instances?created=${encodeURIComponent(inst.id)}`);
    } catch (err) {
      if (err instanceof ApiError) {
        const field = err.fieldIn(FIELDS);
        const key = field === 'size_gib' || field === 'mount_path' ? 'data_disks' : field === 'autostop' ? 'idle_minutes' : field;
        if (key) setFieldErrors({ [key]: err.detail });
        else setFormError(err.detail || err.code);
      } else setFormError(errorText(err));
    } finally {
      setBusy(false);
    }
  };

  const num = (e: Event) => Number((e.target as HTMLInputElement).value);
  const val = (e: Event) => (e.target as HTMLInputElement).value;

  return (
    <section>
      <PageTitle>{t('create.title')}</PageTitle>
      <form class="create-form" onSubmit={submit} noValidate>
        <div class="create-main">
          <fieldset>
            <legend>{t('create.basics')}</legend>
            <Field label={t('create.name')} error={fieldErrors.name}>
              {(id) => <input id={id} value={f.name} onInput={(e) => set({ name: val(e) })} required />}
            </Field>
            <Field label={t('create.zone')} error={fieldErrors.zone}>
              {(id) => (
                <select id={id} value={f.zone} onChange={(e) => set({ zone: val(e), gpu_model: null })}>
                  {zones.map((z) => <option value={z}>{z}</option>)}
                </select>
              )}
            </Field>
          </fieldset>
          <fieldset>
            <legend>{t('create.gpu')}</legend>
            <Field label={t('create.gpu_model')} error={fieldErrors.gpu_model}>
              {(id) => (
                <select id={id} value={f.gpu_model ?? ''} onChange={(e) => set({ gpu_model: val(e) || null })}>
                  <option value="">{t('create.no_gpu')}</option>
                  {gpuOffers.map((o) => (
                    <option value={o.gpu_model!} disabled={!o.gpus_free}>
                      {o.gpu_model} · {o.gpu_memory_gib} GiB · {t('create.free_n', { n: o.gpus_free ?? 0 })}
                      {o.simulated ? ' · ' + t('market.simulated') : ''}
                    </option>
                  ))}
                </select>
              )}
            </Field>
            {f.gpu_model && (
              <Field label={t('create.gpu_count')} error={fieldErrors.gpu_count} hint={t('create.max_n', { n: offer?.max_gpus_per_instance ?? 0 })}>
                {(id) => (
                  <input id={id} type="number" min={1} max={offer?.max_gpus_per_instance || 64} value={f.gpu_count} onInput={(e) => set({ gpu_count: num(e) })} />
                )}
              </Field>
            )}
            <fieldset class="radios">
              <legend>{t('create.billing_mode')}</legend>
              {(['hourly', 'weekly', 'monthly'] as const).map((m) => (
                <label>
                  <input type="radio" name="billing_mode" value={m} checked={f.billing_mode === m} onChange={() => set({ billing_mode: m })} />
                  {t(`billing.mode.${m}`)}
                </label>
              ))}
            </fieldset>
            {f.billing_mode !== 'hourly' && (
              <label class="check">
                <input type="checkbox" checked={f.auto_renew} onChange={(e) => set({ auto_renew: (e.target as HTMLInputElement).checked })} />
                {t('create.auto_renew')}
              </label>
            )}
            {fieldErrors.billing && <small class="error" role="alert">{fieldErrors.billing}</small>}
          </fieldset>
          <fieldset>
            <legend>{t('create.image_and_disks')}</legend>
            <Field label={t('create.image')} error={fieldErrors.image}>
              {(id) => (
                <select id={id} value={f.image} onChange={(e) => set({ image: val(e) })}>
                  {d.images.map((i) => (
                    <option value={i.id}>
                      {i.name} {i.visibility === 'private' ? `(${t('images.own')})` : ''}
                    </option>
                  ))}
                </select>
              )}
            </Field>
            {image && (
              <dl class="facts image-facts">
                <dt>{t('images.os')}</dt><dd>{image.os || '—'}</dd>
                <dt>{t('images.python')}</dt><dd>{image.python || '—'}</dd>
                <dt>{t('images.cuda')}</dt><dd>{image.cuda || '—'}</dd>
                <dt>{t('images.frameworks')}</dt>
                <dd>{Object.entries(image.frameworks ?? {}).map(([k, v]) => `${k} ${v}`).join(', ') || '—'}</dd>
              </dl>
            )}
            <Field label={t('create.system_disk')} error={fieldErrors.system_disk_gib}>
              {(id) => <input id={id} type="number" min={10} max={4096} value={f.system_disk_gib} onInput={(e) => set({ system_disk_gib: num(e) })} />}
            </Field>
            <div class="subsection">
              <h3>{t('create.data_disks')}</h3>
              {f.disks.map((disk, i) => {
                const update = (p: any) => set({ disks: f.disks.map((x, j) => (j === i ? { ...x, ...p } : x)) });
                return (
                  <div class="disk-row" role="group" aria-label={t('create.disk_n', { n: i + 1 })}>
                    {disk.kind === 'new' ? (
                      <Field label={t('create.disk_size')}>
                        {(id) => <input id={id} type="number" min={1} value={disk.size_gib} onInput={(e) => update({ size_gib: num(e) })} />}
                      </Field>
                    ) : (
                      <Field label={t('create.existing_disk')}>
                        {(id) => (
                          <select id={id} value={disk.id} onChange={(e) => update({ id: val(e) })}>
                            {freeDisks.map((x) => <option value={x.id}>{x.name} · {x.size_gib} GiB</option>)}
                          </select>
                        )}
                      </Field>
                    )}
                    <Field label={t('create.mount_path')}>
                      {(id) => <input id={id} value={disk.mount_path} onInput={(e) => update({ mount_path: val(e) })} />}
                    </Field>
                    {disk.kind === 'new' && (
                      <label class="check">
                        <input type="checkbox" checked={disk.delete_on_release} onChange={(e) => update({ delete_on_release: (e.target as HTMLInputElement).checked })} />
                        {t('create.delete_on_release')}
                      </label>
                    )}
                    <button type="button" class="small" onClick={() => set({ disks: f.disks.filter((_, j) => j !== i) })} aria-label={t('create.remove_disk_n', { n: i + 1 })}>
                      {t('common.remove')}
                    </button>
                  </div>
                );
              })}
              {fieldErrors.data_disks && <small class="error" role="alert">{fieldErrors.data_disks}</small>}
              <div class="row">
                <button type="button" onClick={() => set({ disks: [...f.disks, { kind: 'new', size_gib: 10, mount_path: `/root/data${f.disks.length ? f.disks.length + 1 : ''}`, delete_on_release: false }] })}>
                  {t('create.add_new_disk')}
                </button>
                {freeDisks.length > 0 && (
                  <button type="button" onClick={() => set({ disks: [...f.disks, { kind: 'existing', id: freeDisks[0].id, mount_path: `/root/${freeDisks[0].name}` }] })}>
                    {t('create.add_existing_disk')}
                  </button>
                )}
              </div>
            </div>
          </fieldset>
          <fieldset>
            <legend>{t('create.network')}</legend>
            <Field label={t('create.security_group')} error={fieldErrors.security_group}>
              {(id) => (
                <select id={id} value={f.security_group} onChange={(e) => set({ security_group: val(e) })}>
                  {d.groups.map((g) => <option value={g.id}>{g.name}</option>)}
                </select>
              )}
            </Field>
            <fieldset class="checks">
              <legend>{t('create.ports')}</legend>
              {QUICK_PORTS.map((p) => (
                <label>
                  <input type="checkbox" checked={f.ports.includes(p)} onChange={(e) => set({ ports: togglePort(f.ports, p, (e.target as HTMLInputElement).checked) })} />
                  {t(`create.port_${p}` as any)}
                </label>
              ))}
            </fieldset>
            <Field label={t('create.custom_ports')} hint={t('create.custom_ports_hint')} error={fieldErrors.ports}>
              {(id) => <input id={id} value={customPorts} onInput={(e) => setCustomPorts(val(e))} placeholder="8080, 9000" />}
            </Field>
          </fieldset>
          <fieldset>
            <legend>{t('create.access')}</legend>
            <fieldset class="checks">
              <legend>{t('create.ssh_keys')}</legend>
              {d.keys.length === 0 && <p class="muted">{t('create.no_keys')}</p>}
              {d.keys.map((k) => (
                <label>
                  <input type="checkbox" checked={f.ssh_keys.includes(k.id)} onChange={(e) => set({ ssh_keys: (e.target as HTMLInputElement).checked ? [...f.ssh_keys, k.id] : f.ssh_keys.filter((x) => x !== k.id) })} />
                  {k.name}
                </label>
              ))}
              {fieldErrors.ssh_keys && <small class="error" role="alert">{fieldErrors.ssh_keys}</small>}
            </fieldset>
            <Field label={t('create.password')} hint={t('create.password_hint')} error={fieldErrors.password}>
              {(id) => <input id={id} type="password" autocomplete="new-password" value={f.password} onInput={(e) => set({ password: val(e) })} />}
            </Field>
          </fieldset>
          <fieldset>
            <legend>{t('create.cost_control')}</legend>
            <Field label={t('create.idle_minutes')} hint={t('create.idle_hint')} error={fieldErrors.idle_minutes}>
              {(id) => <input id={id} type="number" min={1} value={f.idle_minutes ?? ''} onInput={(e) => set({ idle_minutes: val(e) ? num(e) : null })} />}
            </Field>
            <Field label={t('create.spend_limit')} hint={t('create.spend_hint')} error={fieldErrors.spend_limit}>
              {(id) => <input id={id} inputMode="decimal" value={spendText} onInput={(e) => { setSpendText(val(e)); set({ spend_limit_fen: parseYuan(val(e)) }); }} />}
            </Field>
          </fieldset>
        </div>
        <aside class="card estimate" aria-label={t('create.estimate')} aria-live="polite">
          <h2>{t('create.estimate')}</h2>
          {view ? (
            <dl class="facts">
              <dt>{t('create.per_hour')}</dt><dd data-testid="est-hour">{formatFen(view.perHour)}</dd>
              <dt>{t('create.per_day')}</dt><dd>{formatFen(view.perDay)}</dd>
              <dt>{t('create.per_month')}</dt><dd>{formatFen(view.perMonth)}</dd>
              {f.billing_mode !== 'hourly' && (<><dt>{t('create.upfront')}</dt><dd>{formatFen(view.upfront)}</dd></>)}
              {est && est.storage_per_day > 0 && (<><dt>{t('create.storage_per_day')}</dt><dd>{formatFen(est.storage_per_day)}</dd></>)}
              <dt>{t('create.balance')}</dt><dd>{formatFen(d.acct.balance)}</dd>
            </dl>
          ) : (
            <p class="muted">{estError ?? t('common.loading')}</p>
          )}
          {view && !view.enough && <p class="error" role="alert">{t('create.balance_short', { need: formatFen(view.needed), have: formatFen(d.acct.balance) })}</p>}
          {formError && <p class="error" role="alert">{formError}</p>}
          <button type="submit" class="primary" disabled={busy}>{t('create.submit')}</button>
        </aside>
      </form>
    </section>
  );
}
