// Wire types, as docs in ../shared/spec/api.md name them.
export interface User { id: string; username: string; email?: string | null; role: 'user' | 'admin'; created_at?: string; disabled?: boolean }
export interface Session { user: User; csrf_token: string; expires_at: string }
export interface Zone { name: string; region: string; description: string }
export interface Offer {
  zone: string; gpu_model: string | null; gpu_memory_gib?: number; simulated?: boolean; cpu_per_gpu?: number;
  memory_gib_per_gpu?: number; price_per_gpu_hour?: number; price_per_gpu_week?: number; price_per_gpu_month?: number;
  gpus_total?: number; gpus_free?: number; max_gpus_per_instance?: number; price_per_hour?: number; cpu?: number; memory_gib?: number;
}
export interface Watch { id: string; zone: string; gpu_model: string; created_at: string }
export interface Image {
  id: string; name: string; description: string; os: string; python: string; cuda: string | null;
  frameworks: Record<string, string>; size_bytes: number; visibility: 'public' | 'private'; owner: string | null;
  state: string; created_at: string; ssh?: boolean; deleted_at?: string | null; purge_at?: string | null; cost_per_day?: number;
}
export interface Port { port: number; protocol: string; host: string | null; host_port: number | null; allowed: boolean }
export interface Instance {
  id: string; name: string; owner: string; state: string; state_reason: string | null; zone: string; host: string | null;
  gpu_model: string | null; gpu_count: number; gpus: { index: number; uuid: string; simulated: boolean }[]; cpu: number;
  memory_gib: number; system_disk_gib: number; image: string; no_gpu: boolean; data_disks: { id: string; mount_path: string }[];
  security_group: string; ssh: { host: string; port: number; user: string; command: string; host_key: string | null } | null;
  ports: Port[]; jupyter_url: string | null;
  billing: { mode: string; auto_renew: boolean; expires_at: string | null; price_per_hour: number };
  autostop: { idle_minutes: number; gpu_util_below_percent: number; idle_since: string | null; busy_reason: string | null } | null;
  spend_limit: number | null; created_at: string; started_at: string | null; stopped_at: string | null; run_seconds: number;
  charged: number; release_at?: string | null; release_after_stopped_days?: number | null;
}
export interface Disk {
  id: string; name: string; owner: string; zone: string; host: string | null; size_gib: number; used_bytes: number;
  state: string; instance: string | null; mount_path: string | null; delete_on_release: boolean; created_at: string;
  deleted_at?: string | null; purge_at?: string | null;
}
export interface Snapshot { id: string; name: string; disk: string; size_gib: number; used_bytes: number; state: string; created_at: string; deleted_at?: string | null; purge_at?: string | null }
export interface Rule { protocol: 'tcp' | 'udp'; port_min: number; port_max: number; source: string; description?: string }
export interface SecurityGroup { id: string; name: string; description?: string; rules: Rule[]; created_at?: string }
export interface SshKey { id: string; name: string; public_key: string; fingerprint?: string; created_at: string }
export interface Account { balance: number; currency: string; state: string; alert: { threshold: number; webhook_url: string | null } | null; arrears_since: string | null }
export interface LedgerEntry { id: string; time: string; amount: number; balance_after: number; kind: string; resource: string | null; description: string }
export interface UsageItem { resource?: string; kind: string; quantity: number; unit: string; amount: number; day?: string }
export interface Statement { month: string; opening_balance: number; credits: number; charges: Record<string, number> | number; closing_balance: number; lines: any[] }
export interface Estimate { per_hour: number; per_day: number; per_week: number; per_month: number; upfront: number; storage_per_day: number }
export interface IdleItem { resource: string; kind: string; since: string; cost_per_day: number; name?: string }
export interface Event { id: string; seq: number; time: string; type: string; resource: string; user: string; message: string; data: any }
export interface Token { id: string; name: string; token?: string; created_at: string; last_used_at?: string | null }
export interface Host {
  id: string; name: string; zone: string; state: string; simulated: boolean; cpu: number; memory_gib: number; last_seen: string;
  gpus: { index: number; uuid: string; model: string; memory_gib: number; health: string; instance: string | null; reserved_by: string | null }[];
}
export interface Quota { gpus: number | null; instances: number | null; disk_gib: number | null; images: number | null }
// GET /billing/subscriptions
export interface Subscription {
  instance: string; name: string; instance_state: string; gpu_model: string | null; gpu_count: number;
  term: 'weekly' | 'monthly'; status: 'active' | 'ended'; started_at: string | null; expires_at: string | null;
  auto_renew: boolean; payments: number; paid: number; refunded: number; first_paid_at: string | null; last_paid_at: string | null;
}
