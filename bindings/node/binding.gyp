# binding.gyp -- the sluice addon: src/sluice_node.c (Node-API, C) and the
# C library compiled from its own sources.  The list of those sources is
# CMake's SLUICE_SOURCES, read by scripts/sources.js (from the repository,
# or from deps/sluice in a package made by `npm pack`): it is kept in one
# place.  Flags as CMake's: C11 without extensions, hidden visibility (the
# public header exports the API), a 16-byte compare-and-swap on x86-64.
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
      "cflags_c": ["-std=c11", "-fvisibility=hidden"],
      "cflags": ["-Wall", "-Wextra"],
      "libraries": ["-lpthread", "-lm"],
      "conditions": [
        ["target_arch=='x64'", {"cflags_c": ["-mcx16", "-mtls-dialect=gnu2"]}]
      ]
    }
  ]
}
