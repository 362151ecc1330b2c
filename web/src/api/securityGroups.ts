import { post, put, del, listAll } from './client';
import type { Rule, SecurityGroup } from './types';

const g = (id: string) => `/security-groups/${encodeURIComponent(id)}`;
export const listGroups = () => listAll<SecurityGroup>('/security-groups');
export const createGroup = (name: string, description: string, rules: Rule[], acknowledge_risk: boolean) =>
  post<SecurityGroup>('/security-groups', { name, description, rules, acknowledge_risk });
export const updateGroup = (id: string, rules: Rule[], acknowledge_risk: boolean) => put<SecurityGroup>(g(id), { rules, acknowledge_risk });
export const deleteGroup = (id: string) => del<void>(g(id));
// The rule that opens every port to everyone.
export const isAllOpen = (r: Rule) => (r.source === '0.0.0.0/0' || r.source === '::/0') && r.port_min <= 1 && (r.port_max ?? r.port_min) >= 65535;

// Share of its address family a CIDR covers (0.0.0.0/1 → 0.5); 0 when it does not parse.
export function cidrShare(source: string): number {
  const m = /^([0-9a-fA-F:.]+)(?:\/(\d{1,3}))?$/.exec(source.trim());
  if (!m) return 0;
  const v6 = m[1].includes(':');
  const len = m[2] === undefined ? (v6 ? 128 : 32) : Number(m[2]);
  return Math.pow(2, -len);
}

// Whether the rules together are "widely open" as the API counts it (docs/contract-notes.md,
// Security groups): more than 10 ports of one protocol open to at least half of the IPv4 or the
// IPv6 space. Such a set needs the user's worded acknowledgement (acknowledge_risk: true).
export function widelyOpen(rules: Rule[]): boolean {
  for (const proto of ['tcp', 'udp'])
    for (const v6 of [false, true]) {
      const diff = new Float64Array(65537);
      for (const r of rules) {
        if (r.protocol !== proto || r.source.includes(':') !== v6) continue;
        const lo = Math.max(1, Math.min(65535, r.port_min));
        const hi = Math.max(lo, Math.min(65535, r.port_max ?? r.port_min));
        const share = cidrShare(r.source);
        diff[lo] += share;
        diff[hi + 1] -= share;
      }
      let cover = 0;
      let count = 0;
      for (let p = 1; p <= 65535; p++) {
        cover += diff[p];
        if (cover >= 0.5 - 1e-12 && ++count > 10) return true;
      }
    }
  return false;
}
