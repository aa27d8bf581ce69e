# binding.gyp -- the sluice addon: src/sluice_node.c (Node-API, C) and the
# C library compiled from its own sources.  The list of those sources is
# CMake's SLUICE_SOURCES, read by scripts/sources.js (from the repository,
# or from deps/sluice in a package made by `npm pack`): it is kept in one
# place.  Flags as CMake's: C11 without extensions, hidden visibility (the
# public header exports the API), and on x86-64 the 16-byte
# compare-and-swap and TLS descriptors (scripts/sources.js --cflags).
{
  "targets": [
    {
      "target_name": "sluice",
      "sources": [
        "src/sluice_node.c",
        "<!@(node scripts/sources.js)"
      ],
      "include_dirs": ["<!@(node scripts/sources.js --include)"],
      "defines": ["SLUICE_BUILDING=1", "NAPI_VERSION=8"],
      "cflags_c": ["-std=c11", "-fvisibility=hidden", "<!@(node scripts/sources.js --cflags)"],
      "cflags": ["-Wall", "-Wextra"],
      "libraries": ["-lpthread", "-lm"]
    }
  ]
}
