'use strict';
// Memory: 10^6 calls create no garbage that outlives them.  A child
// process (--expose-gc) makes the calls after a warm-up; after a full
// collection its V8 heap has grown by less than 1 MiB and its resident set
// by less than 8 MiB (a leak of the 300-byte keys' copies alone would be
// 37 MiB; of a result object per decide, 20 MiB of heap).
const test = require('node:test');
const assert = require('node:assert');
const path = require('path');
const { execFileSync } = require('child_process');

test('10^6 calls leave no garbage behind (heap and RSS)', { timeout: 300000 }, () => {
  const out = execFileSync(process.execPath,
    ['--expose-gc', path.join(__dirname, 'fixtures', 'memory.js'), '1000000'],
    { encoding: 'utf8', timeout: 280000 });
  const r = JSON.parse(out.trim().split('\n').pop());
  const heap = r.after.heap - r.before.heap;
  const rss = r.after.rss - r.before.rss;
  console.log(`memory: heap ${heap} B, rss ${rss} B, external ${r.after.external - r.before.external} B after ${r.n} calls`);
  assert.ok(r.allowed > 0);
  assert.ok(heap < 1 << 20, `heap grew by ${heap} B`);
  assert.ok(rss < 8 << 20, `rss grew by ${rss} B`);
});
