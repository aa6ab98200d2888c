#!/usr/bin/env bash
# Print the SIMD levels besides baseline that this CPU runs, as CMake's
# FASTNORM_LEVELS takes them ("avx2;avx512", or "none").  Test builds that
# need only what this machine executes build these and skip the rest.
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
levels=""
has avx2 fma bmi2 && levels="avx2"
has avx512f avx512bw avx512dq avx512vl && levels="$levels;avx512"
levels=${levels#;}
echo "${levels:-none}"
