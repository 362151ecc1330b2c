// Who is signed in. Set from GET /auth/session at load and from sign-in.
import { signal } from '@preact/signals';
import type { Session, User } from './api/types';
import { csrfToken, onUnauthorized } from './api/client';
import { getSession, signOut as apiSignOut } from './api/session';
import { closeStream } from './api/events';

export const user = signal<User | null>(null);
export const sessionChecked = signal(false);
// A message for the sign-in page (e.g. after a password change ended the session).
export const notice = signal<string | null>(null);

export function adopt(s: Session) {
  csrfToken.value = s.csrf_token;
  user.value = s.user;
}

export async function checkSession() {
  try {
    adopt(await getSession());
  } catch {
    user.value = null;
  }
  sessionChecked.value = true;
}

export async function signOut() {
  try {
    await apiSignOut();
  } finally {
    dropSession();
  }
}

export function dropSession() {
  closeStream();
  csrfToken.value = '';
  user.value = null;
}

onUnauthorized.handler = () => {
  if (user.value) dropSession();
};
