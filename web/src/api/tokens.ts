import { post, del, listAll } from './client';
import type { Token } from './types';

export const listTokens = () => listAll<Token>('/tokens');
export const createToken = (name: string) => post<Token>('/tokens', { name });
export const revokeToken = (id: string) => del<void>(`/tokens/${encodeURIComponent(id)}`);
