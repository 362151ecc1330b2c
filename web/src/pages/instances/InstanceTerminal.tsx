// The web terminal: xterm.js over GET /instances/{id}/terminal (binary frames both ways; a text
// frame {"type":"resize"} when the size changes). The session cookie authenticates it.
import { useEffect, useRef, useState } from 'preact/hooks';
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';
import { t } from '../../i18n';
import { terminalUrl } from '../../api/instances';

export function InstanceTerminal({ id }: { id: string }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState<'connecting' | 'open' | 'closed'>('connecting');
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    const term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false, scrollback: 5000 });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(host.current!);
    term.textarea?.setAttribute('aria-label', t('terminal.input'));
    fit.fit();
    const ws = new WebSocket(terminalUrl(id));
    ws.binaryType = 'arraybuffer';
    const enc = new TextEncoder();
    const sendSize = () => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols: term.cols, rows: term.rows }));
    };
    ws.onopen = () => {
      setStatus('open');
      sendSize();
      term.focus();
    };
    ws.onmessage = (m) => {
      if (m.data instanceof ArrayBuffer) term.write(new Uint8Array(m.data));
      else term.write(String(m.data));
    };
    ws.onclose = () => setStatus('closed');
    const input = term.onData((d) => ws.readyState === WebSocket.OPEN && ws.send(enc.encode(d)));
    const binary = term.onBinary((d) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      const b = new Uint8Array(d.length);
      for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 0xff;
      ws.send(b);
    });
    const resized = term.onResize(sendSize);
    const observer = new ResizeObserver(() => fit.fit());
    observer.observe(host.current!);
    return () => {
      observer.disconnect();
      input.dispose();
      binary.dispose();
      resized.dispose();
      ws.close();
      term.dispose();
    };
  }, [id, generation]);
  return (
    <div class="terminal-wrap">
      <div class="row">
        <span role="status" class="muted">{t(`terminal.${status}`)}</span>
        {status === 'closed' && (
          <button type="button" class="small" onClick={() => (setStatus('connecting'), setGeneration((g) => g + 1))}>
            {t('terminal.reconnect')}
          </button>
        )}
      </div>
      <div class="terminal" ref={host} role="region" aria-label={t('terminal.title')} />
    </div>
  );
}
