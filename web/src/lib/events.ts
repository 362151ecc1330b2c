// Folds the event stream into the instance list: an `instance.<state>` event (data.state)
// moves that instance's row to its new state at once; the caller then refreshes that one row.
import type { Event, Instance } from '../api/types';

export function stateFromEvent(e: Pick<Event, 'type' | 'data'>): string | null {
  if (!e.type.startsWith('instance.')) return null;
  if (e.data && typeof e.data.state === 'string') return e.data.state;
  const tail = e.type.slice('instance.'.length);
  if (tail === 'created') return 'creating';
  if (['running', 'stopped', 'released', 'error', 'starting', 'stopping', 'releasing'].includes(tail)) return tail;
  return null;
}

// Returns the same array when nothing changed (so the list does not re-render).
export function applyEvent(list: Instance[], e: Pick<Event, 'type' | 'data' | 'resource'>): Instance[] {
  const state = stateFromEvent(e);
  if (!state) return list;
  const i = list.findIndex((x) => x.id === e.resource);
  if (i < 0) return list;
  if (list[i].state === state && (e.data?.reason ?? null) === list[i].state_reason) return list;
  const next = list.slice();
  next[i] = { ...list[i], state, state_reason: e.data?.reason ?? (state === list[i].state ? list[i].state_reason : null) };
  return next;
}
