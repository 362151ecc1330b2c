// A fixture server for the console's list bench: serves web/dist, a signed-in session, N
// instances and the event stream (events are pushed by the caller through `send`). Only for
// benchmarks: the console itself talks to gpucloudd.
//   node bench/console/fixture.mjs [N]   (standalone: prints its URL)
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { extname, join } from 'node:path';

const dist = new URL('../../web/dist/', import.meta.url).pathname;
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml' };

export function fixtureInstances(n) {
  const now = new Date().toISOString();
  return Array.from({ length: n }, (_, i) => ({
    id: `i-bench${String(i).padStart(5, '0')}`, name: `bench-${i}`, owner: 'u-bench', state: 'running', state_reason: null, zone: 'zone-a', host: 'node-1',
    gpu_model: 'RTX 4090', gpu_count: 1, gpus: [{ index: 0, uuid: 'GPU-x', simulated: true }], cpu: 8, memory_gib: 32, system_disk_gib: 30,
    image: 'img-base', no_gpu: false, data_disks: [], security_group: 'sg-1',
    ssh: { host: '127.0.0.1', port: 30000 + i, user: 'root', command: `ssh -p ${30000 + i} root@127.0.0.1`, host_key: null },
    ports: [{ port: 22, protocol: 'tcp', host: '127.0.0.1', host_port: 30000 + i, allowed: true }], jupyter_url: null,
    billing: { mode: 'hourly', auto_renew: true, expires_at: null, price_per_hour: 198 }, autostop: null, spend_limit: null,
    created_at: now, started_at: now, stopped_at: null, run_seconds: 3600 + i, charged: 198 + i,
  }));
}

export async function startFixture(n = 1000) {
  const instances = fixtureInstances(n);
  const streams = new Set();
  let seq = 0;
  const server = createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const json = (body, status = 200) => { res.writeHead(status, { 'Content-Type': 'application/json' }); res.end(JSON.stringify(body)); };
    if (url.pathname === '/api/v1/auth/session')
      return json({ user: { id: 'u-bench', username: 'bench', role: 'user' }, csrf_token: 't', expires_at: new Date().toISOString() });
    if (url.pathname === '/api/v1/instances') return json({ items: instances, next_cursor: null });
    if (url.pathname.startsWith('/api/v1/instances/')) {
      const inst = instances.find((x) => x.id === url.pathname.split('/')[4]);
      return inst ? json(inst) : json({ code: 'not_found' }, 404);
    }
    if (url.pathname === '/api/v1/disks') return json({ items: [], next_cursor: null });
    if (url.pathname === '/api/v1/events/stream') {
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store' });
      res.write(': open\n\n');
      streams.add(res);
      req.on('close', () => streams.delete(res));
      return;
    }
    if (url.pathname.startsWith('/api/')) return json({ code: 'not_found' }, 404);
    let file = join(dist, url.pathname);
    if (!url.pathname.startsWith('/assets/') || !existsSync(file)) file = join(dist, 'index.html');
    res.writeHead(200, { 'Content-Type': types[extname(file)] ?? 'application/octet-stream' });
    res.end(readFileSync(file));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    instances,
    streams,
    // Writes an instance.<state> event to every open stream; returns when it was written.
    send(inst, state) {
      inst.state = state;
      seq++;
      const e = { id: `ev-${seq}`, seq, time: new Date().toISOString(), type: `instance.${state}`, resource: inst.id, user: 'u-bench', message: '', data: { state, name: inst.name } };
      const sent = performance.timeOrigin + performance.now();
      for (const s of streams) s.write(`id: ${seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
      return sent;
    },
    close() {
      for (const s of streams) s.end();
      server.close();
    },
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const f = await startFixture(Number(process.argv[2] ?? 1000));
  console.log(f.url);
}
