#!/usr/bin/env bash
# The demo: packs the C headers under /usr/include (a real corpus on every Debian
# machine) into an HDF5 token dataset, inspects it, shows the process grid and the first
# global batches on 4 MPI ranks, then trains a tiny LLaMA on 4 ranks with flexible
# sequence parallelism (printing each step's plan), writing checkpoints and a timing
# report; resumes the middle checkpoint on another layout, evaluates and exports.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" flexsp  # the executable alone: the demo runs nothing else
source "$root/scripts/env.sh"
flexsp=${FLEXSP_BUILD_DIR:-$root/build}/flexsp
out=$root/out/demo
mkdir -p "$out"

echo "== pack: /usr/include/**/*.h -> $out/usr_include.h5"
"$flexsp" pack --force --glob '*.h' --out "$out/usr_include.h5" /usr/include
echo
echo "== inspect"
"$flexsp" inspect "$out/usr_include.h5"
echo
echo "== flexsp on 4 MPI ranks (2 emulated nodes): the process grid and the first global batches"
mpirun -np 4 "$flexsp" train --config "$root/configs/demo.ini" \
  --data.path="$out/usr_include.h5" --ranks-per-node 2 --dry-run
echo
echo "== training on 4 MPI ranks with sp_mode = flexsp (plans per step, then progress)"
rm -rf "$out/ckpt" "$out/ckpt_resumed" "$out/report" "$out/hf"
mpirun -np 4 "$flexsp" train --config "$root/configs/demo.ini" \
  --data.path="$out/usr_include.h5" --ranks-per-node 2 --print-plans \
  --checkpoint.dir="$out/ckpt" --checkpoint.every=10 \
  --report.dir="$out/report" --dump-weights="$out/weights.h5" | tee "$out/train.log"
echo
echo "== resuming the step-10 checkpoint on 2 ranks with ZeRO 3: steps 11-20 again"
mpirun -np 2 "$flexsp" train --config "$root/configs/demo.ini" \
  --data.path="$out/usr_include.h5" --parallel.zero=3 \
  --resume "$out/ckpt/step_00000010.h5" --checkpoint.dir="$out/ckpt_resumed" | tee "$out/resume.log"
echo "last step, straight run: $(grep '^step 20/' "$out/train.log" | cut -d'|' -f1-2)"
echo "last step, resumed run:  $(grep '^step 20/' "$out/resume.log" | cut -d'|' -f1-2)"
echo
echo "== evaluation of the final checkpoint on the first 20 documents, and export"
"$flexsp" eval --checkpoint "$out/ckpt/step_00000020.h5" --data "$out/usr_include.h5" --max-docs 20
"$flexsp" export --checkpoint "$out/ckpt/step_00000020.h5" --out "$out/hf" --force
echo
echo "demo: dataset     $out/usr_include.h5"
echo "      checkpoints $out/ckpt (latest: $(cat "$out/ckpt/latest")), $out/ckpt_resumed"
echo "      report      $out/report/report.h5, steps.csv, summary.json"
echo "      weights     $out/weights.h5, HuggingFace export $out/hf"
