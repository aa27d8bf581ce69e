'use strict';
// helpers.js -- what the tests share: the package under test, where the
// contract's worked examples are (tests/golden of the repository: two
// folders up, or deps/sluice/tests/golden in a copy made by test/run.sh),
// and bounded waits.
const fs = require('fs');
const path = require('path');

const pkg = path.resolve(__dirname, '..');

function goldenDir() {
  for (const d of [path.join(pkg, 'deps', 'sluice', 'tests', 'golden'),
                   path.join(pkg, '..', '..', 'tests', 'golden')]) {
    if (fs.existsSync(d)) return d;
  }
  throw new Error('tests/golden not found (from ' + pkg + ')');
}

// Each worked example: its name, spec, requests and expected rows.
function goldenCases() {
  const dir = goldenDir();
  const out = [];
  for (const name of fs.readdirSync(dir).sort()) {
    if (!name.endsWith('.trace')) continue;
    const lines = fs.readFileSync(path.join(dir, name), 'utf8').split('\n');
    const spec = lines[0].split('# spec:')[1].trim();
    const requests = [];
    for (const line of lines) {
      if (!line || line.startsWith('#') || /^[A-Za-z]/.test(line)) continue;
      const parts = line.split(',');
      requests.push({
        time: BigInt(parts[0]),
        key: parts.length > 1 ? parts[1] : '',
        permits: parts.length > 2 && parts[2] !== '' ? BigInt(parts[2]) : 1n,
        raw: parts[0],
      });
    }
    const expected = fs.readFileSync(path.join(dir, name.replace(/\.trace$/, '.expected')), 'utf8')
      .split('\n').slice(1).filter((l) => l).map((l) => l.split(',').slice(0, 7).join(','));
    out.push({ name, spec, requests, expected });
  }
  return out;
}

// A unique name for a shared region of this test run.
function regionName(tag) {
  return `/sluice-node-${tag}-${process.pid}-${Math.floor(Math.random() * 1e9)}`;
}

module.exports = { pkg, goldenDir, goldenCases, regionName };
