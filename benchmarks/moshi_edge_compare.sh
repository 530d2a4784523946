#!/usr/bin/env bash
# The Moshi edge's own work per frame (benchmarks/moshi_edge.py) for two source trees, side by side in one
# run: process CPU time per frame, the trees alternating ROUNDS times in each mode (listening, replying),
# /proc/loadavg printed with each figure. On a quiet machine, or for instruction counts, see the
# callgrind recipe in moshi_edge.py's docstring.
#   benchmarks/moshi_edge_compare.sh BEFORE_SRC AFTER_SRC [REPEATS] [SESSIONS] [FRAMES]
# e.g. a tree exported from the commit before a change: git archive <commit> | tar -x -C /tmp/before
#   benchmarks/moshi_edge_compare.sh /tmp/before/src src
set -euo pipefail
before=$1 after=$2 repeats=${3:-3} sessions=${4:-20} frames=${5:-200}
python=${PYTHON:-python}
here=$(cd "$(dirname "$0")" && pwd)
for mode in listen reply; do
    flags=()
    [ "$mode" = reply ] && flags=(--reply)
    for i in $(seq "$repeats"); do
        for side in before after; do
            tree=$before; [ "$side" = after ] && tree=$after
            line=$(PYTHONPATH=$tree "$python" "$here/moshi_edge.py" --sessions "$sessions" --rounds "$frames" \
                "${flags[@]}" | tail -1)
            echo "$mode $side #$i: $line (load $(cut -d' ' -f1-3 /proc/loadavg))"
        done
    done
done
