'use strict';
// sources.js -- the library's sources, for binding.gyp.
//
// The addon compiles the C library from its own sources, the list CMake
// builds (SLUICE_SOURCES in the top CMakeLists.txt), so that list stays the
// one place that names them.  In the repository the library is two
// directories up; in a package made by `npm pack` it is under deps/sluice/
// (scripts/prepack.js copies it there, with the CMakeLists.txt).  Prints, one per line, the paths
// relative to this package's folder (where node-gyp runs):
//   node scripts/sources.js            the .c files
//   node scripts/sources.js --include  the include directories
//   node scripts/sources.js --cflags   the machine's C flags, as CMake's:
//     on x86-64 -mcx16 (the 16-byte compare-and-swap of the lock-free
//     limiters) and -mtls-dialect=gnu2 when the compiler takes it (TLS
//     descriptors: the counters' thread slot without __tls_get_addr)
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const pkg = path.resolve(__dirname, '..');

// SLUICE_SOURCE_DIR when set (the tests pack a copy of this folder);
// else the repository this folder sits in (it wins, so a stale deps/ copy
// left by an interrupted `npm pack` is never built); else deps/sluice.
function libraryRoot() {
  const env = process.env.SLUICE_SOURCE_DIR;
  if (env) {
    if (!fs.existsSync(path.join(env, 'CMakeLists.txt')) || !fs.existsSync(path.join(env, 'include', 'sluice.h'))) {
      throw new Error(`sluice: SLUICE_SOURCE_DIR=${env} holds no CMakeLists.txt and include/sluice.h`);
    }
    return fs.realpathSync(env);
  }
  const repo = path.resolve(pkg, '..', '..');
  const ours = path.join(repo, 'bindings', 'node', 'binding.gyp');
  const cands = [];
  if (fs.existsSync(ours) && fs.realpathSync(ours) === fs.realpathSync(path.join(pkg, 'binding.gyp'))) {
    cands.push(repo);
  }
  cands.push(path.join(pkg, 'deps', 'sluice'));
  for (const dir of cands) {
    if (fs.existsSync(path.join(dir, 'CMakeLists.txt')) &&
        fs.existsSync(path.join(dir, 'include', 'sluice.h'))) {
      return dir;
    }
  }
  throw new Error('sluice: the library sources are neither in deps/sluice nor two folders up');
}

// The paths of set(SLUICE_SOURCES ...), comments skipped (they may hold
// parentheses), up to the line whose code closes the set.
function sources(root) {
  const file = path.join(root, 'CMakeLists.txt');
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const start = lines.findIndex((l) => /^\s*set\(SLUICE_SOURCES\b/.test(l));
  if (start < 0) throw new Error('sluice: no set(SLUICE_SOURCES ...) in ' + file);
  const out = [];
  let closed = false;
  for (let i = start; i < lines.length && !closed; i++) {
    let code = lines[i].replace(/#.*/, '');
    if (i === start) code = code.replace(/^\s*set\(SLUICE_SOURCES/, '');
    if (code.includes(')')) {
      closed = true;
      code = code.slice(0, code.indexOf(')'));
    }
    for (const word of code.trim().split(/\s+/)) {
      if (!word) continue;
      if (!/^src\/[A-Za-z0-9_/]+\.c$/.test(word)) {
        throw new Error(`sluice: unexpected entry "${word}" in SLUICE_SOURCES`);
      }
      if (!fs.existsSync(path.join(root, word))) throw new Error(`sluice: ${word} is missing`);
      out.push(word);
    }
  }
  if (!closed || out.length === 0) throw new Error('sluice: cannot read SLUICE_SOURCES in ' + file);
  return out;
}

function rel(p) {
  return path.relative(pkg, p).split(path.sep).join('/');
}

function accepts(flag) {
  const cc = process.env.CC || 'cc';
  const r = spawnSync(cc, [flag, '-x', 'c', '-c', '-o', '/dev/null', '-'],
    { input: 'int sluice_probe;\n', stdio: ['pipe', 'ignore', 'ignore'], shell: false });
  return r.status === 0;
}

function cflags() {
  if (process.arch !== 'x64') return [];
  return ['-mcx16', ...(accepts('-mtls-dialect=gnu2') ? ['-mtls-dialect=gnu2'] : [])];
}

if (require.main === module) {
  if (process.argv[2] === '--cflags') {
    console.log(cflags().join('\n'));
    process.exit(0);
  }
  const root = libraryRoot();
  if (process.argv[2] === '--include') {
    console.log([rel(path.join(root, 'include')), rel(path.join(root, 'src'))].join('\n'));
  } else {
    console.log(sources(root).map((s) => rel(path.join(root, s))).join('\n'));
  }
}

module.exports = { libraryRoot, sources };
