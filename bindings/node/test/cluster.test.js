'use strict';
// Exactness across processes: 4 cluster workers, each with its own handle
// on one SharedTable, serve HTTP on one port; a client on loopback counts
// the 200s and 429s against the contract's bound (docs/decisions.md).
//  - sliding-log 10/h per key, 10 keys, 100 requests each, all within a
//    few seconds: exactly 10 admissions per key, whichever worker decides.
//  - token-bucket 200/s burst=20 on one key, for 2 s: the admissions in the
//    run's span T (the client's first send to its last answer, on the
//    monotonic clock every process shares) are at most 20 + 200 T, and at
//    least the burst.
const test = require('node:test');
const assert = require('node:assert');
const path = require('path');
const sluice = require('..');
const { regionName } = require('./helpers');
const { run } = require('./fixtures/load');
const { start, stop } = require('./fixtures/cluster');

const WORKER = path.join(__dirname, 'fixtures', 'shared_worker.js');

test('4 cluster workers share one exact limit per key', { timeout: 180000 }, async () => {
  const name = regionName('cluster');
  const { workers, port } = await start(WORKER, [name, 'sliding-log 10/h', '1000'], 4);
  try {
    const keys = Array.from({ length: 10 }, (_, i) => `client-${i}`);
    const res = await run({ port, concurrency: 16, total: 1000, path: (i) => '/' + keys[i % 10] });
    assert.strictEqual(res.hung, 0);
    assert.strictEqual(res.errors, 0);
    assert.strictEqual(res.codes.get(200), 100, JSON.stringify([...res.codes]));
    assert.strictEqual(res.codes.get(429), 900);
    assert.strictEqual(res.workers.size, 4, 'every worker answered');
    assert.ok(res.allowedBy.size >= 2, 'admissions by several workers');
    // per key, from one more process: every key spent exactly its 10
    const t = new sluice.SharedTable(name, 'sliding-log 10/h', 1000);
    for (const k of keys) assert.strictEqual(t.peek(k).remaining, 0, k);
    assert.strictEqual(t.peek('client-x').remaining, 10);
    t.close();
  } finally {
    await stop(workers);
    sluice.SharedTable.unlink(name);
  }
});

test('4 cluster workers keep a token bucket within its bound', { timeout: 180000 }, async () => {
  const name = regionName('bucket');
  const { workers, port } = await start(WORKER, [name, 'token-bucket 200/s burst=20', '64'], 4);
  try {
    const res = await run({ port, concurrency: 16, durationMs: 2000, path: () => '/k' });
    assert.strictEqual(res.hung, 0);
    assert.strictEqual(res.errors, 0);
    const allowed = res.codes.get(200) || 0;
    const spanNs = res.t1 - res.t0;
    const bound = 20 + Number((200n * spanNs) / 1000000000n);
    assert.ok(allowed <= bound, `${allowed} admitted in ${spanNs} ns, bound ${bound}`);
    assert.ok(allowed >= 20, `${allowed} admitted`);
    assert.ok((res.codes.get(429) || 0) > 0, 'the limit refused some');
    assert.strictEqual(res.workers.size, 4);
  } finally {
    await stop(workers);
    sluice.SharedTable.unlink(name);
  }
});
