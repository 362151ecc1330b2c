import { post, del, listAll, idempotencyKey } from './client';
import type { Disk, Snapshot } from './types';

const d = (id: string) => `/disks/${encodeURIComponent(id)}`;
export const listDisks = (state?: string) => listAll<Disk>('/disks', { state });
export const createDisk = (name: string, zone: string, size_gib: number) =>
  post<Disk>('/disks', { name, zone, size_gib }, { 'Idempotency-Key': idempotencyKey() });
export const deleteDisk = (id: string) => del<void>(d(id));
export const restoreDisk = (id: string) => post<Disk>(`${d(id)}/restore`);
export const resizeDisk = (id: string, size_gib: number) => post<Disk>(`${d(id)}/resize`, { size_gib });
export const detachDisk = (id: string) => post<Disk>(`${d(id)}/detach`);
export const attachDisk = (id: string, instance: string, mount_path: string) => post<Disk>(`${d(id)}/attach`, { instance, mount_path });
export const snapshotDisk = (id: string, name: string) => post<Snapshot>(`${d(id)}/snapshots`, { name }, { 'Idempotency-Key': idempotencyKey() });
