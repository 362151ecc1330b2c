// A small line chart over uPlot (loaded with the pages that use it).
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777'];

// `days`: x is one point per day (each day's noon, UTC seconds): ticks a day apart or more, labelled MM-DD.
const DAY = 86400;
const dayLabel = (v: number) => new Date(v * 1000).toISOString().slice(5, 10);

export function Chart(props: { title: string; x: number[]; series: { label: string; values: (number | null)[] }[]; unit?: string; bars?: boolean; days?: boolean }) {
  const host = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = host.current!;
    const width = Math.max(280, el.clientWidth || 600);
    const opts: uPlot.Options = {
      width,
      height: 200,
      series: [
        {},
        ...props.series.map((s, i) => ({
          label: s.label,
          stroke: COLORS[i % COLORS.length],
          fill: props.bars ? COLORS[i % COLORS.length] + '55' : undefined,
          paths: props.bars ? uPlot.paths.bars!({ size: [0.6, 40] }) : undefined,
          value: (_u: uPlot, v: number | null) => (v === null ? '—' : `${Math.round(v * 100) / 100}${props.unit ?? ''}`),
        })),
      ],
      axes: [
        props.days ? { incrs: [DAY, 2 * DAY, 7 * DAY, 14 * DAY], values: (_u, vals) => vals.map(dayLabel) } : {},
        { values: (_u, vals) => vals.map((v) => `${v}${props.unit ?? ''}`), size: 60 },
      ],
      legend: { show: true },
    };
    const plot = new uPlot(opts, [props.x, ...props.series.map((s) => s.values)] as any, el);
    const ro = new ResizeObserver(() => plot.setSize({ width: Math.max(280, el.clientWidth), height: 200 }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [props.x, props.series]);
  return (
    <figure class="chart">
      <figcaption>{props.title}</figcaption>
      <div ref={host} role="img" aria-label={props.title} />
    </figure>
  );
}
