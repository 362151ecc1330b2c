// Writes FILE.gz beside every js/css/html/svg file of dist/, so gpucloudd can send the
// precompressed file when the browser accepts gzip. Node's zlib only.
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync, constants } from 'node:zlib';

const root = new URL('../dist/', import.meta.url).pathname;
let count = 0;
function walk(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (/\.(js|css|html|svg)$/.test(name)) {
      writeFileSync(path + '.gz', gzipSync(readFileSync(path), { level: constants.Z_BEST_COMPRESSION }));
      count++;
    }
  }
}
walk(root);
console.log(`precompress: ${count} files`);
