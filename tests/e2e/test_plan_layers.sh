#!/usr/bin/env bash
# The planner's layers, read from the includes: lib/plan/ (the contract) imports none of
# model, optim, runtime, train or planner; lib/planner/ imports neither the runtime nor
# the trainer; nothing the planner runs per step (context, cost/, mb/, step/, planner.h)
# includes analysis/. A file that breaks one is named.
source "$(dirname "$0")/lib.sh"
src=${FLEXSP_SOURCE_DIR:?FLEXSP_SOURCE_DIR must name the source tree}
cd "$src"
bad=$(grep -rn '#include "lib/\(model\|optim\|runtime\|train\|planner\)/' lib/plan || true)
[[ -z $bad ]] || fail "lib/plan/ includes a layer above it: $bad"
bad=$(grep -rn '#include "lib/\(runtime\|train\)/' lib/planner || true)
[[ -z $bad ]] || fail "lib/planner/ includes the runtime or the trainer: $bad"
bad=$(grep -rn '#include "lib/planner/analysis/' lib/planner/cost lib/planner/mb lib/planner/step \
  lib/planner/*.h lib/planner/*.cpp || true)
[[ -z $bad ]] || fail "the per-step planner includes analysis/: $bad"
echo "ok: plan/ below, planner/ beside the runtime, analysis/ on top"
