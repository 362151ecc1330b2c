import { post, put, del, listAll } from './client';
import type { Rule, SecurityGroup } from './types';

const g = (id: string) => `/security-groups/${encodeURIComponent(id)}`;
export const listGroups = () => listAll<SecurityGroup>('/security-groups');
export const createGroup = (name: string, description: string, rules: Rule[], acknowledge_risk: boolean) =>
  post<SecurityGroup>('/security-groups', { name, description, rules, acknowledge_risk });
export const updateGroup = (id: string, rules: Rule[], acknowledge_risk: boolean) => put<SecurityGroup>(g(id), { rules, acknowledge_risk });
export const deleteGroup = (id: string) => del<void>(g(id));
// The rule that opens every port to everyone needs the user's worded acknowledgement.
export const isAllOpen = (r: Rule) => (r.source === '0.0.0.0/0' || r.source === '::/0') && r.port_min <= 1 && r.port_max >= 65535;
