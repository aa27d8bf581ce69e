'use strict';
// express-rate-limit with SluiceStore: the same Express app under 4 cluster
// workers, driven over loopback by test/fixtures/load.js.  The store's
// SharedTable is "fixed-window 100/1000ms": windows [k s, (k+1) s) of the
// monotonic clock every process reads, so the 200s of a run from t0 to t1
// (sluice.now() at the client's first send and last answer) are at most 100
// per window touched.
//  - 10 s of load: 200s within the bound, 429s for the rest, no request
//    unanswered, every worker serving.
//  - a worker killed (SIGKILL) mid-run: the limit still holds, and every
//    request is answered or fails at once (a reset connection), none hangs.
//  - the MemoryStore (not shared) is the control: under the same load it
//    admits past the shared bound, so the bound is a real test.
// And the store's own rules, in process: totalHits, resetKey, get, the
// options it refuses.
const test = require('node:test');
const assert = require('node:assert');
const path = require('path');
const sluice = require('..');
const { regionName } = require('./helpers');
const { run } = require('./fixtures/load');
const { start, stop } = require('./fixtures/cluster');

const WORKER = path.join(__dirname, 'fixtures', 'express_worker.js');
const LIMIT = 100;
const W = 1000000000n;

function bound(t0, t1, limit = LIMIT) {
  return limit * Number(t1 / W - t0 / W + 1n);
}

test('Express + SluiceStore, 4 cluster workers, 10 s of load: within the bound',
  { timeout: 240000 }, async () => {
    const name = regionName('express');
    const { workers, port } = await start(WORKER, ['sluice', name, String(LIMIT), '1000'], 4);
    try {
      const t0 = sluice.now();
      const res = await run({ port, concurrency: 16, durationMs: 10000, path: () => '/' });
      const t1 = sluice.now();
      const ok = res.codes.get(200) || 0;
      const refused = res.codes.get(429) || 0;
      console.log(`express sluice: ${res.done} requests, ${ok} x 200, ${refused} x 429, bound ${bound(t0, t1)}`);
      assert.strictEqual(res.hung, 0);
      assert.strictEqual(res.errors, 0);
      assert.strictEqual(ok + refused, res.done, JSON.stringify([...res.codes]));
      assert.ok(ok <= bound(t0, t1), `${ok} > ${bound(t0, t1)}`);
      assert.ok(ok >= LIMIT, `only ${ok} admitted`);
      assert.ok(refused > 0);
      assert.strictEqual(res.workers.size, 4);
    } finally {
      await stop(workers);
      sluice.SharedTable.unlink(name);
    }
  });

test('a worker killed mid-run: the limit holds and no request hangs', { timeout: 240000 }, async () => {
  const name = regionName('kill');
  const { workers, port } = await start(WORKER, ['sluice', name, String(LIMIT), '1000'], 4);
  try {
    const t0 = sluice.now();
    const pending = run({ port, concurrency: 16, durationMs: 6000, timeoutMs: 10000, path: () => '/' });
    await new Promise((r) => setTimeout(r, 2000));
    workers[0].process.kill('SIGKILL');
    const res = await pending;
    const t1 = sluice.now();
    const ok = res.codes.get(200) || 0;
    console.log(`express kill: ${res.done} requests, ${ok} x 200, ${res.codes.get(429) || 0} x 429, ` +
                `${res.errors} reset, bound ${bound(t0, t1)}`);
    assert.strictEqual(res.hung, 0);
    assert.ok(res.errors <= 16, `${res.errors} failed`); // at most the requests in flight
    assert.ok(ok <= bound(t0, t1), `${ok} > ${bound(t0, t1)}`);
    assert.ok((res.codes.get(429) || 0) > 0);
    // the workers left still decide on the same region, after the kill
    const after = await run({ port, concurrency: 4, total: 3 * LIMIT, path: () => '/' });
    assert.strictEqual(after.hung, 0);
    assert.strictEqual(after.errors, 0);
    assert.ok((after.codes.get(200) || 0) <= 2 * LIMIT);
    assert.ok(!after.workers.has(String(workers[0].id)));
  } finally {
    await stop(workers);
    sluice.SharedTable.unlink(name);
  }
});

test('the control: MemoryStore under 4 workers admits past the shared bound', { timeout: 240000 },
  async () => {
    // 10 a second: any load passes the shared bound when each worker counts alone
    const { workers, port } = await start(WORKER, ['memory', '-', '10', '1000'], 4);
    try {
      const t0 = sluice.now();
      const res = await run({ port, concurrency: 16, durationMs: 3000, path: () => '/' });
      const t1 = sluice.now();
      const ok = res.codes.get(200) || 0;
      console.log(`express memory: ${ok} x 200, shared bound ${bound(t0, t1, 10)}`);
      assert.strictEqual(res.hung, 0);
      assert.ok(ok > bound(t0, t1, 10), `${ok} <= ${bound(t0, t1, 10)}: the control did not exceed`);
    } finally {
      await stop(workers);
    }
  });

test('SluiceStore: totalHits, resetTime, resetKey, get, and the options it refuses', () => {
  const store = new sluice.SluiceStore();
  assert.strictEqual(store.localKeys, true);
  assert.throws(() => store.increment('k'), /before init/);
  store.init({ windowMs: 3600000, limit: 3 });
  for (let i = 1; i <= 3; i++) assert.strictEqual(store.increment('k').totalHits, i);
  const refused = store.increment('k');
  assert.strictEqual(refused.totalHits, 4);
  assert.ok(refused.resetTime instanceof Date);
  assert.ok(refused.resetTime.getTime() > Date.now() && refused.resetTime.getTime() <= Date.now() + 3600000);
  assert.strictEqual(store.increment('k').totalHits, 4); // refusals take nothing
  assert.strictEqual(store.get('k').totalHits, 3);
  assert.strictEqual(store.get('other'), undefined);
  store.resetKey('k');
  assert.strictEqual(store.increment('k').totalHits, 1);
  assert.throws(() => store.decrement('k'), /cannot give hits back/);
  store.shutdown();
  assert.throws(() => store.increment('k'), /shut down/);

  for (const opts of [{ windowMs: 1000, limit: 5, skipFailedRequests: true },
                      { windowMs: 1000, limit: 5, skipSuccessfulRequests: true },
                      { windowMs: 1000, limit: () => 5 },
                      { windowMs: 0.5, limit: 5 }]) {
    const s = new sluice.SluiceStore();
    assert.throws(() => s.init(opts), sluice.SluiceError);
    assert.throws(() => s.increment('k'), sluice.SluiceError); // and stays refused
  }
  assert.throws(() => new sluice.SluiceStore({ path: '/x' }), /unknown SluiceStore option "path"/);
  const shared = new sluice.SluiceStore({ shared: regionName('store') });
  assert.strictEqual(shared.localKeys, false);
});
