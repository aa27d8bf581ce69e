'use strict';
// npm pack makes an installable package that builds the library from the
// repository's sources: pack a copy of this folder (SLUICE_SOURCE_DIR
// names the library, so this folder is left as it is), check what the
// tarball holds, install it into a fresh folder with npm (its install
// script builds the addon with node-gyp, from deps/sluice in the package),
// and decide there: a worked example, a SpecError, the TypeScript
// declarations beside it.  Nothing is fetched from the registry (the
// package has no dependencies).
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { libraryRoot } = require('../scripts/sources');
const { pkg } = require('./helpers');

const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';

test('npm pack, then npm install in a fresh folder, builds and decides', { timeout: 1200000 }, () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-pack-'));
  try {
    const src = path.join(tmp, 'src');
    fs.mkdirSync(src);
    for (const f of ['package.json', 'binding.gyp', 'index.js', 'index.d.ts', 'src', 'scripts', 'lib']) {
      fs.cpSync(path.join(pkg, f), path.join(src, f), { recursive: true });
    }
    const env = { ...process.env, SLUICE_SOURCE_DIR: libraryRoot() };
    const out = execFileSync(NPM, ['pack', '--json', '--pack-destination', tmp],
      { cwd: src, env, encoding: 'utf8', timeout: 300000 });
    const info = JSON.parse(out)[0];
    const files = info.files.map((f) => f.path);
    const version = JSON.parse(fs.readFileSync(path.join(pkg, 'package.json'), 'utf8')).version;
    assert.strictEqual(info.filename, `sluice-${version}.tgz`);
    for (const f of ['package.json', 'index.js', 'index.d.ts', 'binding.gyp', 'src/sluice_node.c',
                     'scripts/build.js', 'scripts/sources.js', 'lib/flexible.js', 'lib/express.js',
                     'deps/sluice/CMakeLists.txt', 'deps/sluice/include/sluice.h',
                     'deps/sluice/src/base/alloc.c', 'deps/sluice/src/table/region_table.c']) {
      assert.ok(files.includes(f), `${f} is in the package`);
    }
    assert.ok(!files.some((f) => f.startsWith('test/') || f.startsWith('build/') ||
                                 f.startsWith('node_modules/') || f.includes('redis')), files.join(' '));
    assert.ok(!fs.existsSync(path.join(src, 'deps')), 'postpack removed deps/');

    const app = path.join(tmp, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), '{"name":"app","version":"1.0.0","private":true}\n');
    const clean = { ...process.env };
    delete clean.SLUICE_SOURCE_DIR;
    execFileSync(NPM, ['install', '--no-audit', '--no-fund', '--offline', path.join(tmp, info.filename)],
      { cwd: app, env: clean, stdio: ['ignore', 'ignore', 'inherit'], timeout: 900000 });
    const script = `
      const s = require('sluice');
      const lim = new s.Limiter('token-bucket 10/s burst=5');
      const got = [];
      for (let i = 0; i < 6; i++) got.push(lim.decide(1, 950000000n).allowed);
      let spec = '';
      try { new s.Table('token-bucket 10/s burts=5', 8); } catch (e) { spec = e.name + ': ' + e.message; }
      console.log(JSON.stringify({ got, spec, version: s.version(),
        dts: require('fs').existsSync(require.resolve('sluice').replace(/index\\.js$/, 'index.d.ts')) }));`;
    const r = JSON.parse(execFileSync(process.execPath, ['-e', script], { cwd: app, env: clean, encoding: 'utf8' }));
    assert.deepStrictEqual(r.got, [true, true, true, true, true, false]);
    assert.strictEqual(r.spec, 'SpecError: unknown option "burts=5"');
    assert.strictEqual(r.version, version);
    assert.strictEqual(r.dts, true);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
