// The create page's form → the body of POST /instances (and /billing/estimate), and what the
// estimate box says.
import type { Estimate } from '../api/types';

export interface NewDisk { kind: 'new'; size_gib: number; mount_path: string; delete_on_release: boolean }
export interface ExistingDisk { kind: 'existing'; id: string; mount_path: string }
export interface CreateForm {
  name: string;
  zone: string;
  gpu_model: string | null;  // null: no GPU
  gpu_count: number;
  billing_mode: 'hourly' | 'weekly' | 'monthly';
  auto_renew: boolean;
  image: string;
  system_disk_gib: number;
  disks: (NewDisk | ExistingDisk)[];
  security_group: string;
  ports: number[];
  ssh_keys: string[];
  password: string;
  idle_minutes: number | null;
  spend_limit_fen: number | null;
}

export function createBody(f: CreateForm): Record<string, unknown> {
  const body: Record<string, unknown> = {
    name: f.name,
    zone: f.zone || undefined,
    system_disk_gib: f.system_disk_gib,
    billing: { mode: f.billing_mode, auto_renew: f.auto_renew },
    ports: [...new Set(f.ports)].sort((a, b) => a - b),
  };
  if (f.gpu_model) {
    body.gpu_model = f.gpu_model;
    body.gpu_count = f.gpu_count;
  } else {
    body.gpu_count = 0;
  }
  if (f.image) body.image = f.image;
  if (f.disks.length)
    body.data_disks = f.disks.map((d) =>
      d.kind === 'new'
        ? { size_gib: d.size_gib, mount_path: d.mount_path, delete_on_release: d.delete_on_release }
        : { id: d.id, mount_path: d.mount_path },
    );
  if (f.security_group) body.security_group = f.security_group;
  if (f.ssh_keys.length) body.ssh_keys = f.ssh_keys;
  if (f.password) body.password = f.password;
  if (f.idle_minutes) body.autostop = { idle_minutes: f.idle_minutes };
  if (f.spend_limit_fen) body.spend_limit = f.spend_limit_fen;
  return body;
}

export interface EstimateView {
  perHour: number;
  perDay: number;
  perMonth: number;
  upfront: number;       // what is taken at create (a subscription's whole price; 0 hourly)
  needed: number;        // what the balance must cover to create
  enough: boolean;
}

// Pay-as-you-go needs one hour of its price in the balance; a subscription its whole price.
export function estimateView(e: Estimate, mode: CreateForm['billing_mode'], balance: number | null): EstimateView {
  const needed = mode === 'hourly' ? e.per_hour : e.upfront;
  return {
    perHour: e.per_hour,
    perDay: e.per_day,
    perMonth: e.per_month,
    upfront: mode === 'hourly' ? 0 : e.upfront,
    needed,
    enough: balance === null ? true : balance >= needed,
  };
}

// Quick port toggles on the create page.
export const QUICK_PORTS = [22, 8888, 6006, 7860] as const;

export function togglePort(ports: number[], port: number, on: boolean): number[] {
  const rest = ports.filter((p) => p !== port);
  return on ? [...rest, port].sort((a, b) => a - b) : rest;
}

export function parsePorts(text: string): number[] | null {
  const parts = text.split(/[\s,]+/).filter(Boolean);
  const out: number[] = [];
  for (const p of parts) {
    if (!/^\d{1,5}$/.test(p)) return null;
    const n = Number(p);
    if (n < 1 || n > 65535) return null;
    out.push(n);
  }
  return out;
}
