import { get, post, del, patch, listAll, idempotencyKey } from './client';
import type { Estimate, Image, Instance } from './types';

const p = (id: string) => `/instances/${encodeURIComponent(id)}`;
export const listInstances = () => listAll<Instance>('/instances');
export const getInstance = (id: string) => get<Instance>(p(id));
export const createInstance = (body: Record<string, unknown>) => post<Instance>('/instances', body, { 'Idempotency-Key': idempotencyKey() });
export const estimate = (body: Record<string, unknown>) => post<Estimate>('/billing/estimate', body);
export const stopInstance = (id: string) => post<Instance>(`${p(id)}/stop`);
export const startInstance = (id: string, no_gpu = false) => post<Instance>(`${p(id)}/start`, { no_gpu });
export const restartInstance = (id: string) => post<Instance>(`${p(id)}/restart`);
export const releaseInstance = (id: string) => del<Instance>(p(id));
export const updateInstance = (id: string, body: Record<string, unknown>) => patch<Instance>(p(id), body);
export const saveImage = (id: string, name: string, description: string) =>
  post<Image>(`${p(id)}/images`, { name, description }, { 'Idempotency-Key': idempotencyKey() });
export interface Series { name: string; gpu?: number; points: [string | number, number][] }
export const metrics = (id: string, since: string) =>
  get<{ series: Series[]; monitoring?: any }>(`${p(id)}/metrics`, { since });
export const terminalUrl = (id: string) => {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${location.host}/api/v1${p(id)}/terminal`;
};
export const jupyterPath = (id: string) => `/api/v1${p(id)}/jupyter/`;
export const proxyPath = (id: string, port: number) => `/api/v1${p(id)}/proxy/${port}/`;
