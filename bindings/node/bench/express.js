'use strict';
// express.js -- requests/s of one Express app behind express-rate-limit
// under 4 cluster workers, with sluice's store (SluiceStore on a
// SharedTable: one limit for all workers) against express-rate-limit's
// MemoryStore (one limit per worker, not shared), in one run
// (docs/benchmarks.md, "Node.js"):
//
//   node bench/express.js [--rounds 5] [--seconds 5] [--concurrency 16]
//                         [--stores sluice,memory]
//
// The app is test/fixtures/express_worker.js; the limit (10^9 a minute) is
// never reached, so every request takes the same path through the app and
// the difference is the store's cost.  The two apps run at the same time,
// 4 workers each on ports of their own, each driven by a load process of
// its own (bench/load_client.js, keep-alive connections on loopback) for
// the same seconds: on a machine shared with other work both see the same
// CPU, where apps measured one after the other would see whatever the
// other tenants left at that moment.  The figure per round is each app's
// requests/s and their ratio; the result is the median ratio of the rounds.
// `--stores memory,memory` (or sluice,sluice) runs the same store twice:
// the spread of that ratio is what the machine's noise alone gives;
// `local` is SluiceStore on a Table of each worker's own (not shared).
const cluster = require('cluster');
const net = require('net');
const path = require('path');
const os = require('os');
const { execFile } = require('child_process');
const sluice = require('..');
const { start, stop } = require('../test/fixtures/cluster');

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}
const ROUNDS = arg('--rounds', 5);
const SECONDS = arg('--seconds', 5);
const CONC = arg('--concurrency', 16);
const WORKER = path.join(__dirname, '..', 'test', 'fixtures', 'express_worker.js');
const CLIENT = path.join(__dirname, 'load_client.js');
const si = process.argv.indexOf('--stores');
const STORES = si > 0 ? process.argv[si + 1].split(',') : ['sluice', 'memory'];
if (STORES.length !== 2 || !STORES.every((k) => ['sluice', 'local', 'memory'].includes(k))) {
  throw new Error('--stores takes two of sluice, local, memory: e.g. sluice,memory');
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

// The load process, asynchronously: the primary accepts the connections
// (cluster's round-robin), so it must not block while the clients run.
function load(port) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [CLIENT, String(port), String(SECONDS * 1000), String(CONC)],
      { encoding: 'utf8', timeout: (SECONDS + 120) * 1000 }, (err, out) => {
        if (err) return reject(err);
        const r = JSON.parse(out);
        if (r.hung || r.errors || r.codes['200'] !== r.done) return reject(new Error(`bad run: ${out}`));
        return resolve(r.done / (r.ms / 1000));
      });
  });
}

async function main() {
  if (!cluster.isPrimary) return;
  const region = `/sluice-node-bench-express-${process.pid}`;
  const ps = await freePort();
  const pm = await freePort();
  // two sluice apps share nothing: a region each
  const a = await start(WORKER, [STORES[0], region + 'a', '1000000000', '60000', String(ps)], 4);
  const b = await start(WORKER, [STORES[1], region + 'b', '1000000000', '60000', String(pm)], 4);
  const rows = [];
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const [s, m] = await Promise.all([load(ps), load(pm)]);
      rows.push({ s, m, ratio: s / m });
      console.log(`round ${r + 1}: ${STORES[0]} ${s.toFixed(0)}, ${STORES[1]} ${m.toFixed(0)} requests/s, ` +
                  `ratio ${(s / m).toFixed(3)}`);
    }
  } finally {
    await stop([...a.workers, ...b.workers]);
    sluice.SharedTable.unlink(region + 'a');
    sluice.SharedTable.unlink(region + 'b');
  }
  console.log(`Node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(1)}, ` +
              `4 workers per app, ${CONC} connections per app, ${SECONDS} s a round, ` +
              `median of ${ROUNDS} rounds`);
  console.log('| store | requests/s |');
  console.log('| --- | ---: |');
  const name = { sluice: 'SluiceStore (SharedTable, one limit for the 4 workers)',
                 local: 'SluiceStore (a Table per worker)',
                 memory: 'MemoryStore (one limit per worker)' };
  console.log(`| ${name[STORES[0]]} | ${median(rows.map((x) => x.s)).toFixed(0)} |`);
  console.log(`| ${name[STORES[1]]} | ${median(rows.map((x) => x.m)).toFixed(0)} |`);
  const ratios = rows.map((x) => x.ratio);
  console.log(`${STORES[0]} / ${STORES[1]}, median of the rounds' ratios: ${median(ratios).toFixed(3)} ` +
              `(${Math.min(...ratios).toFixed(3)} .. ${Math.max(...ratios).toFixed(3)}; target: within 5%)`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
