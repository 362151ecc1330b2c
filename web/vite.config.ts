import { defineConfig } from 'vite';
import preact from '@preact/preset-vite';

// The console is served by gpucloudd at `/`; `npm run dev` proxies the API to a local daemon
// (GPUCLOUD_URL, default http://127.0.0.1:8080).
export default defineConfig({
  plugins: [preact()],
  base: '/',
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    sourcemap: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    proxy: {
      '/api': { target: process.env.GPUCLOUD_URL ?? 'http://127.0.0.1:8080', ws: true, changeOrigin: false },
    },
  },
  test: {
    include: ['tests/unit/**/*.test.ts'],
    environment: 'node',
  },
});
