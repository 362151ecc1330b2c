import { get, post, put, patch, listAll, idempotencyKey } from './client';
import type { Host, Instance, LedgerEntry, Quota, User } from './types';

const u = (id: string) => `/admin/users/${encodeURIComponent(id)}`;
export const listHosts = () => listAll<Host>('/admin/hosts');
export const listAllInstances = () => listAll<Instance>('/admin/instances');
export const listUsers = () => listAll<User>('/admin/users');
export const creditUser = (id: string, amount: number, note: string, key = idempotencyKey()) =>
  post<LedgerEntry>(`${u(id)}/credit`, { amount, note }, { 'Idempotency-Key': key });
export const getQuota = (id: string) => get<Quota & Record<string, unknown>>(`${u(id)}/quota`);
export const setQuota = (id: string, q: Quota) => put<Quota>(`${u(id)}/quota`, q);
export const setDisabled = (id: string, disabled: boolean) => patch<User>(u(id), { disabled });
export const getPrices = () => get<any>('/admin/prices');
export const setPrices = (table: any) => put<any>('/admin/prices', table);
export const summary = (month: string) => get<any>('/admin/billing/summary', { month });
