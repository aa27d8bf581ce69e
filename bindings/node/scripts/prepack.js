'use strict';
// prepack.js -- before `npm pack` / `npm publish`: copy what the addon
// builds from into deps/sluice/ (ignored by git), so the package builds
// the library anywhere: the top CMakeLists.txt (its SLUICE_SOURCES list,
// read by scripts/sources.js), include/, and the folders of src/ that the
// list names.  `--clean` (postpack) removes the copy.
const fs = require('fs');
const path = require('path');
const { sources } = require('./sources');

const pkg = path.resolve(__dirname, '..');
const repo = path.resolve(pkg, '..', '..');
const dest = path.join(pkg, 'deps', 'sluice');

fs.rmSync(path.join(pkg, 'deps'), { recursive: true, force: true });
if (process.argv[2] !== '--clean') {
  const list = sources(repo);
  const dirs = [...new Set(list.map((s) => path.dirname(s)))];
  fs.mkdirSync(dest, { recursive: true });
  fs.copyFileSync(path.join(repo, 'CMakeLists.txt'), path.join(dest, 'CMakeLists.txt'));
  fs.cpSync(path.join(repo, 'include'), path.join(dest, 'include'), { recursive: true });
  for (const d of dirs) {
    fs.cpSync(path.join(repo, d), path.join(dest, d), {
      recursive: true,
      filter: (src) => fs.statSync(src).isDirectory() || /\.[ch]$/.test(src),
    });
  }
}
