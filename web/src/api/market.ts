import { get, post, del, listAll } from './client';
import type { Offer, Watch, Zone } from './types';

export const listZones = () => listAll<Zone>('/zones');
export const listOffers = () => get<{ items: Offer[] }>('/market').then((r) => r.items);
export const listWatches = () => listAll<Watch>('/market/watches');
export const createWatch = (zone: string, gpu_model: string) => post<Watch>('/market/watches', { zone, gpu_model });
export const deleteWatch = (id: string) => del<void>(`/market/watches/${encodeURIComponent(id)}`);
