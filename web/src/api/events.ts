// The event stream (Server-Sent Events): one EventSource for the whole console, shared by
// every page that wants live state. EventSource resumes after Last-Event-ID by itself.
import type { Event } from './types';
import { BASE, get } from './client';

type Listener = (e: Event) => void;
const listeners = new Set<Listener>();
let source: EventSource | null = null;

function open() {
  source = new EventSource(`${BASE}/events/stream`, { withCredentials: true });
  const handle = (m: MessageEvent) => {
    try {
      const e = JSON.parse(m.data) as Event;
      for (const l of listeners) l(e);
    } catch {
      /* a keep-alive or something unparsable */
    }
  };
  source.onmessage = handle;
  // Named events (`event: instance.running`) arrive as their own type; listen to the ones we use.
  for (const t of ['instance.created', 'instance.running', 'instance.stopped', 'instance.released', 'instance.error',
    'instance.starting', 'instance.stopping', 'instance.releasing', 'market.gpu_available',
    'disk.created', 'disk.available', 'disk.attached', 'disk.detached', 'disk.resized', 'disk.deleted', 'disk.error',
    'snapshot.created', 'snapshot.available', 'snapshot.deleted', 'snapshot.error', 'snapshot.restored'])
    source.addEventListener(t, handle as any);
}

export function subscribe(l: Listener): () => void {
  listeners.add(l);
  if (!source) open();
  return () => {
    listeners.delete(l);
  };
}

export function closeStream() {
  source?.close();
  source = null;
}

export const recentEvents = (resource?: string) =>
  get<{ items: Event[] }>('/events', { resource, limit: 50 }).then((r) => r.items);
