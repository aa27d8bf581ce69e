'use strict';
// prepack.js -- before `npm pack` / `npm publish`: copy what the addon
// builds from into deps/sluice/ (ignored by git), so the package builds
// the library anywhere: the top CMakeLists.txt (its SLUICE_SOURCES list,
// read by scripts/sources.js), include/ (less sluice/redis.h), and the
// folders of src/ that the list names.  `--clean` (postpack) removes the
// copy.  The library is SLUICE_SOURCE_DIR when set, else the repository
// this folder sits in.
const fs = require('fs');
const path = require('path');
const { libraryRoot, sources } = require('./sources');

const pkg = path.resolve(__dirname, '..');
const dest = path.join(pkg, 'deps', 'sluice');

if (process.argv[2] === '--clean') {
  fs.rmSync(path.join(pkg, 'deps'), { recursive: true, force: true });
} else {
  // the library (SLUICE_SOURCE_DIR, or the repository two folders up),
  // resolved before deps/ is emptied
  const repo = fs.realpathSync(libraryRoot());
  if (repo.startsWith(fs.realpathSync(pkg) + path.sep)) {
    throw new Error('sluice: prepack needs the repository (or SLUICE_SOURCE_DIR), not a deps/ copy');
  }
  fs.rmSync(path.join(pkg, 'deps'), { recursive: true, force: true });
  const list = sources(repo);
  const dirs = [...new Set(list.map((s) => path.dirname(s)))];
  fs.mkdirSync(dest, { recursive: true });
  fs.copyFileSync(path.join(repo, 'CMakeLists.txt'), path.join(dest, 'CMakeLists.txt'));
  // the public headers but the Redis tier's (its library is not built here)
  fs.cpSync(path.join(repo, 'include'), path.join(dest, 'include'), {
    recursive: true,
    filter: (src) => path.basename(src) !== 'redis.h',
  });
  for (const d of dirs) {
    fs.cpSync(path.join(repo, d), path.join(dest, d), {
      recursive: true,
      filter: (src) => fs.statSync(src).isDirectory() || /\.[ch]$/.test(src),
    });
  }
}
