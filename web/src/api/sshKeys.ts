import { post, del, listAll } from './client';
import type { SshKey } from './types';

export const listKeys = () => listAll<SshKey>('/ssh-keys');
export const addKey = (name: string, public_key: string) => post<SshKey>('/ssh-keys', { name, public_key });
export const deleteKey = (id: string) => del<void>(`/ssh-keys/${encodeURIComponent(id)}`);
