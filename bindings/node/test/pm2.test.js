'use strict';
// PM2: the app of test/fixtures/pm2_app.js under PM2 in cluster mode, 4
// instances, each with its own handle on one SharedTable; a client on
// loopback counts exactly 10 admissions per key of "sliding-log 10/h" (10
// keys, 100 requests each), answered by every instance.  PM2 runs in a
// PM2_HOME of the test's own, and `pm2 kill` ends its daemon and the app
// whatever the outcome.  pm2 is a devDependency.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const net = require('net');
const os = require('os');
const path = require('path');
const http = require('http');
const { spawnSync } = require('child_process');
const sluice = require('..');
const { regionName } = require('./helpers');
const { run } = require('./fixtures/load');

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

// The instance that answers a probe on a connection of its own, or null.
function probe(port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/probe-key', agent: false }, (res) => {
      res.resume();
      resolve(res.headers['x-worker'] || null);
    });
    req.setTimeout(2000, () => req.destroy());
    req.on('error', () => resolve(null));
  });
}

test('4 PM2 cluster instances share one exact limit per key', { timeout: 300000 }, async () => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-pm2-'));
  const name = regionName('pm2');
  const port = await freePort();
  const pm2 = require.resolve('pm2/bin/pm2');
  const env = { ...process.env, PM2_HOME: home, SLUICE_TEST_REGION: name,
                SLUICE_TEST_SPEC: 'sliding-log 10/h', SLUICE_TEST_PORT: String(port) };
  const pm2run = (args) => spawnSync(process.execPath, [pm2, ...args],
    { env, encoding: 'utf8', timeout: 120000 });
  try {
    const st = pm2run(['start', path.join(__dirname, 'fixtures', 'pm2_app.js'), '-i', '4',
                       '--name', 'sluice-test', '--no-autorestart']);
    assert.strictEqual(st.status, 0, st.stdout + st.stderr);
    // PM2 starts the instances one after the other: wait (bounded) until
    // each has answered a connection
    const seen = new Set();
    for (let i = 0; i < 240 && seen.size < 4; i++) {
      const w = await probe(port);
      if (w === null) await new Promise((r) => setTimeout(r, 250));
      else seen.add(w);
    }
    assert.strictEqual(seen.size, 4, `instances up: ${[...seen]}`);
    const keys = Array.from({ length: 10 }, (_, i) => `client-${i}`);
    const res = await run({ port, concurrency: 16, total: 1000, path: (i) => '/' + keys[i % 10] });
    assert.strictEqual(res.hung, 0);
    assert.strictEqual(res.errors, 0);
    assert.strictEqual(res.codes.get(200), 100, JSON.stringify([...res.codes]));
    assert.strictEqual(res.codes.get(429), 900);
    assert.strictEqual(res.workers.size, 4, `instances answering: ${[...res.workers.keys()]}`);
    const t = new sluice.SharedTable(name, 'sliding-log 10/h', 1000);
    for (const k of keys) assert.strictEqual(t.peek(k).remaining, 0, k);
    t.close();
  } finally {
    pm2run(['kill']);
    sluice.SharedTable.unlink(name);
    fs.rmSync(home, { recursive: true, force: true });
  }
});
