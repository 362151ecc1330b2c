import { describe, expect, it } from 'vitest';
import { createBody, estimateView, parsePorts, togglePort, type CreateForm } from '../../src/lib/estimate';

const form: CreateForm = {
  name: 'train-1', zone: 'zone-a', gpu_model: 'RTX 4090', gpu_count: 2, billing_mode: 'hourly', auto_renew: true,
  image: 'img-base', system_disk_gib: 30, disks: [], security_group: 'sg-1', ports: [22], ssh_keys: [], password: '',
  idle_minutes: null, spend_limit_fen: null,
};
const est = { per_hour: 400, per_day: 9600, per_week: 67200, per_month: 288000, upfront: 0, storage_per_day: 0 };

describe('estimateView', () => {
  it('needs one hour of the price for pay-as-you-go', () => {
    const v = estimateView(est, 'hourly', 500);
    expect(v.needed).toBe(400);
    expect(v.upfront).toBe(0);
    expect(v.enough).toBe(true);
    expect(estimateView(est, 'hourly', 399).enough).toBe(false);
  });
  it('needs the whole subscription up front', () => {
    const sub = { ...est, upfront: 67200 };
    const v = estimateView(sub, 'weekly', 60000);
    expect(v.upfront).toBe(67200);
    expect(v.needed).toBe(67200);
    expect(v.enough).toBe(false);
    expect(estimateView(sub, 'weekly', 67200).enough).toBe(true);
  });
  it('passes the per-hour/day/month figures through', () => {
    const v = estimateView(est, 'hourly', null);
    expect([v.perHour, v.perDay, v.perMonth]).toEqual([400, 9600, 288000]);
    expect(v.enough).toBe(true);
  });
});

describe('createBody', () => {
  it('sends a GPU instance as the API names it', () => {
    const b = createBody({ ...form, ports: [8888, 22, 8888] });
    expect(b).toMatchObject({ name: 'train-1', zone: 'zone-a', gpu_model: 'RTX 4090', gpu_count: 2, image: 'img-base',
      system_disk_gib: 30, billing: { mode: 'hourly', auto_renew: true }, ports: [22, 8888], security_group: 'sg-1' });
    expect(b).not.toHaveProperty('password');
    expect(b).not.toHaveProperty('autostop');
  });
  it('sends gpu_count 0 and no model without a GPU', () => {
    const b = createBody({ ...form, gpu_model: null });
    expect(b.gpu_count).toBe(0);
    expect(b).not.toHaveProperty('gpu_model');
  });
  it('sends new and existing data disks, autostop and the spend limit', () => {
    const b = createBody({
      ...form, idle_minutes: 30, spend_limit_fen: 10000,
      disks: [{ kind: 'new', size_gib: 10, mount_path: '/root/data', delete_on_release: false }, { kind: 'existing', id: 'd-1', mount_path: '/root/d' }],
    });
    expect(b.data_disks).toEqual([{ size_gib: 10, mount_path: '/root/data', delete_on_release: false }, { id: 'd-1', mount_path: '/root/d' }]);
    expect(b.autostop).toEqual({ idle_minutes: 30 });
    expect(b.spend_limit).toBe(10000);
  });
});

describe('ports', () => {
  it('toggles quick ports', () => {
    expect(togglePort([22], 8888, true)).toEqual([22, 8888]);
    expect(togglePort([22, 8888], 22, false)).toEqual([8888]);
    expect(togglePort([22], 22, true)).toEqual([22]);
  });
  it('parses custom ports', () => {
    expect(parsePorts('8080, 9000 7000')).toEqual([8080, 9000, 7000]);
    expect(parsePorts('')).toEqual([]);
    expect(parsePorts('0')).toBeNull();
    expect(parsePorts('70000')).toBeNull();
    expect(parsePorts('80a')).toBeNull();
  });
});
