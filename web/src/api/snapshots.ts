import { post, del, listAll } from './client';
import type { Snapshot } from './types';

const s = (id: string) => `/snapshots/${encodeURIComponent(id)}`;
export const listSnapshots = (state?: string) => listAll<Snapshot>('/snapshots', { state });
export const deleteSnapshot = (id: string) => del<void>(s(id));
export const restoreSnapshot = (id: string) => post<Snapshot>(`${s(id)}/restore`);
