#!/usr/bin/env bash
# The demo: packs the C headers under /usr/include (a real corpus on every Debian
# machine) into an HDF5 token dataset, inspects it, shows the process grid and the first
# global batches on 4 MPI ranks, then trains a tiny LLaMA on 4 ranks with flexible
# sequence parallelism, printing each step's plan (SP groups per micro-batch).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
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
mpirun -np 4 "$flexsp" train --config "$root/configs/demo.ini" \
  --data.path="$out/usr_include.h5" --ranks-per-node 2 --print-plans \
  --report.dir="$out/report" --dump-weights="$out/weights.h5"
echo
echo "demo: dataset     $out/usr_include.h5"
echo "      weights     $out/weights.h5   (flexsp inspect it)"
echo "      report      $out/report/report.h5, steps.csv, summary.json"
