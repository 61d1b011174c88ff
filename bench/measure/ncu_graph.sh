#!/usr/bin/env bash
# Warp stall reasons (cycles per issued instruction) and instructions of whole graph
# launches of a short smollm2 decode, one line per launch, by Nsight Compute's graph
# profiling: ncu_graph.sh ONEPASS SKIP COUNT. Under `onepass bench --prefill 16 --decode 64`
# the decode steps are the launches of ~69 M instructions (one step) and ~550 M (eight
# fed steps per graph).
set -u
onepass=$1; skip=$2; count=$3
mkdir -p /tmp/onepass-models
f=/tmp/onepass-models/smollm2-135m-q4_1.gguf
[ -s "$f" ] || "$onepass" make-model smollm2-135m --type q4_1 -o "$f" >/dev/null
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
m=gpu__time_duration.sum,smsp__inst_executed.sum
for r in no_instruction imc_miss long_scoreboard short_scoreboard wait barrier membar branch_resolving \
         math_pipe_throttle mio_throttle lg_throttle dispatch_stall drain sleeping selected not_selected; do
  m=$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
"$ncu" --graph-profiling graph --launch-skip "$skip" --launch-count "$count" --metrics "$m" \
  "$onepass" bench -m "$f" --backend cuda --prefill 16 --decode 64 --reps 1 2>&1 |
  grep -E "gpu__time|inst_executed|stalled" |
  sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' |
  awk '/gpu__time/ {printf "\n%s %s", $3, $2} /inst_executed/ {printf " inst=%s", $3}
       / inst / && !/gpu__time|inst_executed/ {if ($3 + 0 >= 0.05) printf " %s=%s", $1, $3}'
echo
