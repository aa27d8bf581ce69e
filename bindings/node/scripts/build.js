'use strict';
// build.js -- build the addon (npm install runs it): node-gyp rebuild,
// against the headers of the running Node when they sit beside it
// (<prefix>/include/node, as NodeSource's packages and the official
// tarballs have them), so nothing is downloaded; else node-gyp's own way
// (npm_config_nodedir, or its download).  node-gyp: the one npm passes to
// install scripts (npm_config_node_gyp), else a node-gyp installed beside
// this package, else the one bundled with npm.  SLUICE_BUILD_JOBS:
// parallel compiles (default 2).  The addon is C only, so it links with
// the C compiler (node-gyp's default linker is the C++ one): no g++
// needed, unless LINK says otherwise.
const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');

function nodeGyp() {
  const cands = [];
  if (process.env.npm_config_node_gyp) cands.push(process.env.npm_config_node_gyp);
  try {
    cands.push(require.resolve('node-gyp/bin/node-gyp.js'));
  } catch (e) {
    // not installed beside the package
  }
  const prefix = path.resolve(path.dirname(process.execPath), '..');
  cands.push(path.join(prefix, 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  for (const c of cands) if (fs.existsSync(c)) return c;
  throw new Error('sluice: node-gyp not found (npm install node-gyp, or run under npm)');
}

function main() {
  const args = [nodeGyp(), 'rebuild', '--jobs', process.env.SLUICE_BUILD_JOBS || '2'];
  const prefix = path.resolve(path.dirname(process.execPath), '..');
  if (!process.env.npm_config_nodedir &&
      fs.existsSync(path.join(prefix, 'include', 'node', 'node_api.h')) &&
      fs.existsSync(path.join(prefix, 'include', 'node', 'common.gypi'))) {
    args.push('--nodedir=' + prefix);
  }
  const env = { ...process.env };
  if (!env.LINK) env.LINK = env.CC || 'cc';
  const r = spawnSync(process.execPath, args, { cwd: path.resolve(__dirname, '..'), stdio: 'inherit', env });
  if (r.error) throw r.error;
  process.exitCode = r.status === null ? 1 : r.status;
}

main();
