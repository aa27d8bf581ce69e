#!/usr/bin/env bash
# config.sh -- sluice-rls --check on envoyproxy/ratelimit's config cases:
# each file refused as envoyproxy/ratelimit refuses it (its
# test/config/*.yaml: the cases are rewritten here), with FILE:LINE and the
# reason, or accepted with its count of limits.
#   tests/rls/config.sh build/sluice-rls
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# case NAME EXPECT: the YAML on stdin goes to $tmp/NAME/c.yaml; EXPECT is
# "ok: ..." or the message's tail after "c.yaml:".
case_() {
    local name=$1 expect=$2
    mkdir -p "$tmp/$name"
    cat > "$tmp/$name/c.yaml"
    local out rc=0
    out=$("$bin" --check "$tmp/$name" 2>&1) || rc=$?
    out=${out//$tmp\/$name\//}
    local want=$expect
    [[ $expect == ok:* ]] || want="c.yaml:$expect"
    if [[ $out != "$want" ]] || { [[ $expect == ok:* ]] && [ $rc -ne 0 ]; } || { [[ $expect != ok:* ]] && [ $rc -ne 2 ]; }; then
        echo "FAIL $name: exit $rc, got '$out', want '$want'"
        fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}

case_ bad_unit "6: invalid rate limit unit 'fortnight'" <<'EOF'
domain: d
descriptors:
  - key: a
    value: b
    rate_limit:
      unit: fortnight
      requests_per_unit: 5
EOF
case_ bad_yaml "2: error loading yaml file: found unexpected end of stream" <<'EOF'
'''
EOF
case_ duplicate_key "6: duplicate descriptor composite key 'd.a_b'" <<'EOF'
domain: d
descriptors:
  - key: a
    value: b

  - key: a
    value: b
EOF
case_ duplicate_key_nested "8: duplicate descriptor composite key 'd.a_b.c'" <<'EOF'
domain: d
descriptors:
  - key: a
    value: b
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: c
        rate_limit: {unit: second, requests_per_unit: 2}
EOF
case_ empty_domain "1: config file cannot have empty domain" <<'EOF'
descriptors:
EOF
case_ empty_key "3: descriptor has empty key" <<'EOF'
domain: d
descriptors:
  - value: v
EOF
case_ misspelled_key "5: config error, unknown key 'ratelimit'" <<'EOF'
domain: d
descriptors:
  - key: a
    value: b
    ratelimit:
      unit: day
      requests_per_unit: 5
EOF
case_ misspelled_key2 "7: config error, unknown key 'requestsperunit'" <<'EOF'
domain: d
descriptors:
  - key: a
    value: b
    rate_limit:
      unit: day
      requestsperunit: 5
EOF
case_ non_map_list "3: config error, yaml file contains list of type other than map: x" <<'EOF'
domain: d
descriptors:
  - x
  - y
EOF
case_ non_string_key "1: config error, key is not of type string: 0.5" <<'EOF'
0.5: d
descriptors:
  - key: a
EOF
case_ replaces_empty "7: should not have an empty replaces entry" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      name: me
      replaces:
        - name:
      unit: second
      requests_per_unit: 5
EOF
case_ replaces_self "7: replaces should not contain name of same descriptor" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      name: me
      replaces:
        - name: me
      unit: second
      requests_per_unit: 5
EOF
case_ unlimited_with_unit "6: should not specify rate limit unit when unlimited" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      unlimited: true
      unit: day
      requests_per_unit: 25
EOF
case_ bad_number "6: 'requests_per_unit' must be an integer from 0 to 4294967295, not 'ten'" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: day
      requests_per_unit: ten
EOF
case_ too_big_number "6: 'requests_per_unit' must be an integer from 0 to 4294967295, not '4294967296'" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: day
      requests_per_unit: 4294967296
EOF
case_ bad_bool "4: 'shadow_mode' must be true or false, not 'maybe'" <<'EOF'
domain: d
descriptors:
  - key: a
    shadow_mode: maybe
    rate_limit: {unit: day, requests_per_unit: 1}
EOF
case_ unknown_algorithm "5: unknown algorithm 'gcra' (want fixed-window, sliding-log, sliding-wheel, sliding-approx, token-bucket or leaky-bucket)" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit:
      algorithm: gcra
      unit: second
      requests_per_unit: 5
EOF
case_ burst_fixed_window "4: 'burst' applies to token-bucket and leaky-bucket only" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5, burst: 10}
EOF
case_ burst_zero "4: 'burst' must be at least 1" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit: {algorithm: token-bucket, unit: second, requests_per_unit: 5, burst: 0}
EOF
case_ unit_and_period "4: give 'unit' or 'period', not both" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, period: 5m, requests_per_unit: 5}
EOF
case_ bad_period "4: rate limit 'fixed-window 5/5x': bad period \"5x\" in \"5/5x\": expected [N]UNIT with N >= 1 and UNIT one of ns us ms s m min h d" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit: {period: 5x, requests_per_unit: 5}
EOF
case_ unlimited_with_algorithm "4: should not specify period, algorithm or burst when unlimited" <<'EOF'
domain: d
descriptors:
  - key: a
    rate_limit: {unlimited: true, algorithm: token-bucket}
EOF
case_ extensions "ok: 1 domains, 4 limits" <<'EOF'
domain: d
descriptors:
  - key: tb
    rate_limit: {algorithm: token-bucket, period: 1s, requests_per_unit: 10, burst: 20}
  - key: five_minutes
    rate_limit: {period: 5m, requests_per_unit: 100}
  - key: sliding
    rate_limit: {algorithm: sliding-log, unit: minute, requests_per_unit: 3}
  - key: leaky
    rate_limit: {algorithm: leaky-bucket, period: 250ms, requests_per_unit: 1, burst: 4}
EOF
case_ every_unit "ok: 1 domains, 8 limits" <<'EOF'
# Every unit, a wildcard, unlimited, shadow mode, nested levels, a null list.
domain: d
descriptors:
  - {key: s, rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: m, rate_limit: {unit: MINUTE, requests_per_unit: 1}}
  - {key: h, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: d, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}
  - {key: mo, rate_limit: {unit: month, requests_per_unit: 1}}
  - key: y
    value: "2*"
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: year, requests_per_unit: 0, name: yearly}
  - key: u
    rate_limit: {unlimited: true}
  - key: n
    value: "1"
    descriptors:
      - key: deeper
        descriptors:
EOF
# Two files with one domain: the second is refused, naming its file.
mkdir -p "$tmp/dup_domain"
printf 'domain: d\ndescriptors:\n' > "$tmp/dup_domain/a.yaml"
printf '# again\ndomain: d\n' > "$tmp/dup_domain/b.yaml"
out=$("$bin" --check "$tmp/dup_domain" 2>&1) && rc=0 || rc=$?
if [ "$rc" -eq 2 ] && [ "$out" = "$tmp/dup_domain/b.yaml:2: duplicate domain 'd' in config file" ]; then
    echo "ok   duplicate_domain"
else
    echo "FAIL duplicate_domain: exit $rc, '$out'"
    fails=$((fails + 1))
fi
# An empty directory is an empty config; a missing one is refused.
mkdir -p "$tmp/empty"
[ "$("$bin" --check "$tmp/empty")" = "ok: 0 domains, 0 limits" ] && echo "ok   empty_dir" || { echo "FAIL empty_dir"; fails=$((fails + 1)); }
if "$bin" --check "$tmp/nope" 2>/dev/null; then
    echo "FAIL missing_dir accepted"
    fails=$((fails + 1))
else
    echo "ok   missing_dir"
fi

[ $fails -eq 0 ] || { echo "$fails case(s) failed"; exit 1; }
echo "all config cases passed"
