#!/bin/sh
# NodeWright NVIDIA tuning: the verdict on what a host reads back. The one comparator:
# the package's post-interrupt check runs it on the node, the role's check (through the
# nodewright.fleet.tuning_check filter) on the controller.
#
#   sh verdict.sh CHECKS OBSERVED
#
# CHECKS: one "ID<TAB>PROBE<TAB>RULE<TAB>EXPECTED" line per setting (resolved.checks;
# for rule skip, EXPECTED is the reason). OBSERVED: "PROBE<TAB>VALUE" lines (observe.sh).
# Rules: eq (the same words), tokens (every expected word is among the observed ones,
# the kernel command line), enabled (every observed word is Enabled: one per GPU),
# governor (eq, or unverified where the host has no cpufreq), skip (unverified).
# Prints one line per setting and a summary:
#   ok<TAB>ID
#   failed<TAB>ID<TAB>EXPECTED<TAB>OBSERVED
#   unverified<TAB>ID<TAB>REASON
#   summary<TAB>TEXT
# and exits 1 when a setting failed.
[ $# -eq 2 ] || { echo "usage: $0 CHECKS OBSERVED" >&2; exit 2; }
exec awk -F'\t' '
  function norm(s) { gsub(/[ \t]+/, " ", s); sub(/^ /, "", s); sub(/ $/, "", s); return s }
  function fail(id, want, got) {
    failed++
    printf "failed\t%s\t%s\t%s\n", id, want, got
    msg = msg (msg == "" ? "" : "; ") id ": expected " want ", observed " got
  }
  function unverify(id, why) { unverified++; printf "unverified\t%s\t%s\n", id, why }
  FILENAME == ARGV[1] { if ($1 != "") { seen[$1] = 1; value[$1] = substr($0, length($1) + 2) }; next }
  $1 == "" || $1 ~ /^#/ { next }
  {
    id = $1; probe = $2; rule = $3; want = $4
    if (rule == "skip") { unverify(id, want); next }
    if (!(probe in seen)) { fail(id, want, "<not observed>"); next }
    got = norm(value[probe])
    if (rule == "governor" && got == "<unavailable>") {
      unverify(id, "the host exposes no cpufreq governor"); next
    }
    ok = 0
    if (rule == "tokens") {
      ok = 1
      line = " " got " "
      n = split(want, t, " ")
      for (i = 1; i <= n; i++) if (index(line, " " t[i] " ") == 0) ok = 0
    } else if (rule == "enabled") {
      n = split(got, t, " ")
      ok = n > 0
      for (i = 1; i <= n; i++) if (t[i] != "Enabled") ok = 0
    } else {
      ok = got == norm(want)
    }
    if (ok) { verified++; printf "ok\t%s\n", id } else fail(id, want, got)
  }
  END {
    if (failed) { printf "summary\t%d setting(s) did not take effect: %s\n", failed, msg; exit 1 }
    printf "summary\tall %d setting(s) in effect", verified
    if (unverified) printf ", %d unverified", unverified
    printf "\n"
  }' "$2" "$1"
