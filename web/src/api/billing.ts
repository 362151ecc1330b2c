import { get, put, del, listAll } from './client';
import type { Account, IdleItem, LedgerEntry, Statement, Subscription, UsageItem } from './types';

export const account = () => get<Account>('/billing/account');
export const ledger = (since?: string, until?: string) => listAll<LedgerEntry>('/billing/ledger', { since, until });
export const usage = (since: string, until: string, group_by: 'day' | 'resource') =>
  get<{ items: UsageItem[] }>('/billing/usage', { since, until, group_by }).then((r) => r.items);
export const statement = (month: string) => get<Statement>(`/billing/statements/${month}`);
export const idle = () => get<{ items: IdleItem[]; cost_per_day: number }>('/billing/idle');
export const setAlert = (threshold: number, webhook_url: string | null) => put<Account>('/billing/alert', { threshold, webhook_url });
export const clearAlert = () => del<void>('/billing/alert');
export const subscriptions = () => listAll<Subscription>('/billing/subscriptions');
