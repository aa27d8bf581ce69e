'use strict';
// The TypeScript declarations (index.d.ts): tsc --strict compiles
// test/fixtures/usage.ts, the calls docs/node.md shows, and its
// @ts-expect-error lines must each be errors.  typescript is a
// devDependency.
const test = require('node:test');
const assert = require('node:assert');
const path = require('path');
const { spawnSync } = require('child_process');

test('index.d.ts: tsc --strict accepts the documented calls and refuses the wrong ones', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'es2020',
    '--module', 'commonjs', path.join(__dirname, 'fixtures', 'usage.ts')],
  { encoding: 'utf8', timeout: 120000 });
  assert.strictEqual(r.status, 0, r.stdout + r.stderr);
});
