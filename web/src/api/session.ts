import { get, post, del, put, request } from './client';
import type { Session, User } from './types';

export const getSession = () => get<Session>('/auth/session');
export const signIn = (username: string, password: string) => post<Session>('/auth/session', { username, password });
export const signOut = () => del<void>('/auth/session');
export const register = (username: string, password: string, email?: string) =>
  post<User>('/auth/register', email ? { username, password, email } : { username, password });
export const me = () => get<User>('/me');
export const changePassword = (old_password: string, new_password: string, revoke_tokens: boolean) =>
  put<void>('/me/password', { old_password, new_password, revoke_tokens });
export const myQuota = () => request<any>('GET', '/me/quota');
