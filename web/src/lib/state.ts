// How an instance's state is shown: a badge tone and what a user may do in it.
export type Tone = 'ok' | 'busy' | 'idle' | 'bad' | 'gone';

const tones: Record<string, Tone> = {
  running: 'ok',
  creating: 'busy',
  starting: 'busy',
  stopping: 'busy',
  releasing: 'busy',
  stopped: 'idle',
  error: 'bad',
  released: 'gone',
  // disks, snapshots, images, hosts
  available: 'ok',
  attached: 'ok',
  ready: 'ok',
  deleting: 'busy',
  draining: 'busy',
  deleted: 'gone',
  unreachable: 'bad',
};

export function stateTone(state: string): Tone {
  return tones[state] ?? 'busy';
}

export type Action = 'stop' | 'start' | 'start_no_gpu' | 'restart' | 'release' | 'save_image';

// Actions the API accepts in each state (others answer `conflict`).
export function allowedActions(state: string, hasGpu: boolean): Action[] {
  switch (state) {
    case 'running':
      return ['stop', 'restart', 'save_image', 'release'];
    case 'stopped':
      return hasGpu ? ['start', 'start_no_gpu', 'release', 'save_image'] : ['start', 'release', 'save_image'];
    case 'error':
      return ['start', 'release'];
    case 'creating':
    case 'starting':
      return ['release'];
    default:
      return [];
  }
}
