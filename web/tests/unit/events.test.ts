import { describe, expect, it } from 'vitest';
import { applyEvent, stateFromEvent } from '../../src/lib/events';
import { allowedActions, stateTone } from '../../src/lib/state';
import { problemField } from '../../src/api/client';

const inst = (id: string, state: string) => ({ id, state, state_reason: null }) as any;

describe('event reducer', () => {
  it('reads the state from an instance event', () => {
    expect(stateFromEvent({ type: 'instance.running', data: { state: 'running' } })).toBe('running');
    expect(stateFromEvent({ type: 'instance.created', data: {} })).toBe('creating');
    expect(stateFromEvent({ type: 'instance.stopped', data: null })).toBe('stopped');
    expect(stateFromEvent({ type: 'instance.autostop', data: {} })).toBeNull();
    expect(stateFromEvent({ type: 'disk.created', data: { state: 'available' } })).toBeNull();
  });
  it('moves only the named row, and returns the same list when nothing changes', () => {
    const list = [inst('i-1', 'creating'), inst('i-2', 'running')];
    const next = applyEvent(list, { type: 'instance.running', resource: 'i-1', data: { state: 'running' } });
    expect(next.map((i) => i.state)).toEqual(['running', 'running']);
    expect(next[1]).toBe(list[1]);
    expect(applyEvent(next, { type: 'instance.running', resource: 'i-1', data: { state: 'running' } })).toBe(next);
    expect(applyEvent(list, { type: 'instance.running', resource: 'i-9', data: { state: 'running' } })).toBe(list);
  });
  it('carries the reason', () => {
    const next = applyEvent([inst('i-1', 'running')], { type: 'instance.stopped', resource: 'i-1', data: { state: 'stopped', reason: 'autostop' } });
    expect(next[0].state_reason).toBe('autostop');
  });
});

describe('badges and actions', () => {
  it('maps states to tones', () => {
    expect(stateTone('running')).toBe('ok');
    expect(stateTone('creating')).toBe('busy');
    expect(stateTone('stopped')).toBe('idle');
    expect(stateTone('error')).toBe('bad');
    expect(stateTone('something-new')).toBe('busy');
  });
  it('offers the actions each state allows', () => {
    expect(allowedActions('running', true)).toEqual(['stop', 'restart', 'save_image', 'release']);
    expect(allowedActions('stopped', true)).toContain('start_no_gpu');
    expect(allowedActions('stopped', false)).not.toContain('start_no_gpu');
    expect(allowedActions('releasing', true)).toEqual([]);
  });
});

describe('problemField', () => {
  it('finds the field a detail names first', () => {
    const fields = ['name', 'system_disk_gib', 'data_disks', 'mount_path', 'ports'];
    expect(problemField('system_disk_gib: must be from 10 to 4096', fields)).toBe('system_disk_gib');
    expect(problemField('data_disks[0].mount_path: must be absolute', fields)).toBe('data_disks');
    expect(problemField('the balance is too low', fields)).toBeNull();
    expect(problemField('ports: at most 10', fields)).toBe('ports');
  });
});

import { widelyOpen, cidrShare } from '../../src/api/securityGroups';
describe('widelyOpen', () => {
  const r = (port_min: number, port_max: number, source: string, protocol: 'tcp' | 'udp' = 'tcp') => ({ protocol, port_min, port_max, source });
  it('counts ports open to half the space or more', () => {
    expect(widelyOpen([r(1, 65535, '0.0.0.0/0')])).toBe(true);
    expect(widelyOpen([r(1, 10, '0.0.0.0/0')])).toBe(false);
    expect(widelyOpen([r(1, 11, '0.0.0.0/0')])).toBe(true);
    expect(widelyOpen([r(1, 100, '0.0.0.0/1'), r(1, 100, '128.0.0.0/1')])).toBe(true);
    expect(widelyOpen([r(1, 65535, '10.0.0.0/8')])).toBe(false);
    expect(widelyOpen([r(1, 65535, '::/0')])).toBe(true);
    expect(widelyOpen([r(22, 22, '0.0.0.0/0'), r(8888, 8888, '0.0.0.0/0')])).toBe(false);
  });
  it('reads CIDRs', () => {
    expect(cidrShare('0.0.0.0/0')).toBe(1);
    expect(cidrShare('1.2.3.4')).toBe(Math.pow(2, -32));
    expect(cidrShare('nonsense!')).toBe(0);
  });
});

describe('badges of other resources', () => {
  it('maps disk, image and host states', () => {
    expect(stateTone('available')).toBe('ok');
    expect(stateTone('ready')).toBe('ok');
    expect(stateTone('unreachable')).toBe('bad');
    expect(stateTone('deleted')).toBe('gone');
  });
});
