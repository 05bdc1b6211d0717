#!/usr/bin/env bash
# Record every PyTorch benchmark of mptutor on a CUDA GPU, then check the GPU path.
#
#   bash benchmarks/record-gpu.sh                    # on a GPU host: records in data/results/
#   PYTHON=/opt/venv/bin/python bash benchmarks/record-gpu.sh
#   bash benchmarks/record-gpu.sh --smoke            # any machine: the same path, tiny, on the
#                                                    # CPU, records in a temporary folder
#
# Steps (each benchmark with --save writes one JSON record with its provenance: device,
# driver, CUDA, cuDNN and package versions, date, command, git commit, raw timings):
#   1. benchmarks/gemm_sweep.py       strict FP32, TF32, FP16, BF16 and FP8 (torch._scaled_mm,
#                                     where the GPU has it) at 1024..8192 and n - 1, each sample
#                                     a CUDA graph of back-to-back products timed with events
#   2. benchmarks/resnet50_amp.py     ResNet50, batch 256: strict FP32, TF32, AMP FP16, AMP BF16,
#                                     in NCHW and in channels_last
#   3. benchmarks/scaler_overhead.py  mptutor master weights + loss scaler vs torch.amp.GradScaler
#                                     on ResNet50's parameters, host syncs counted
#   4. the records of this run against the project's targets (mptutor.bench.TARGETS)
#   5. the tests marked `gpu` (if pytest is installed)
#   6. notebooks/pytorch/06-tensor-core-performance.ipynb run top to bottom as a script on the
#      GPU path: its assertions check what the lesson claims (no Jupyter needed)
# Steps 1-3 stop the script at the first failure; 5 and 6 both run, and the exit status is
# non-zero if either failed. --no-checks skips 5 and 6; --notebook runs 6 in --smoke mode too.
#
# Options: --smoke, --out-dir DIR (where records go), --no-checks, --notebook, -h/--help.
# Environment: PYTHON (default python3) must have PyTorch (CUDA build), torchvision, NumPy and
# ml_dtypes; mptutor is taken from this checkout (PYTHONPATH), installed or not.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg

smoke=0
checks=1
notebook_in_smoke=0
out_dir=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --smoke) smoke=1 ;;
        --no-checks) checks=0 ;;
        --notebook) notebook_in_smoke=1 ;;
        --out-dir)
            [[ $# -ge 2 ]] || { echo "record-gpu.sh: --out-dir needs a folder" >&2; exit 2; }
            out_dir="$2"
            shift
            ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "record-gpu.sh: unknown option '$1' (see --help)" >&2
            exit 2
            ;;
    esac
    shift
done

say() { printf '\n== %s\n' "$*"; }
run() {
    printf '+ %s\n' "$*"
    "$@"
}

if [[ $smoke == 1 ]]; then
    out_dir="${out_dir:-$(mktemp -d "${TMPDIR:-/tmp}/mptutor-smoke.XXXXXX")}"
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # tiny work: threads only contend
    gemm_args=(--smoke)
    resnet_args=(--smoke)
    scaler_args=(--smoke)
else
    "$PYTHON" - <<'EOF'
import sys
try:
    import torch
except ImportError:
    sys.exit("record-gpu.sh: this Python has no PyTorch; set PYTHON=<a Python with CUDA PyTorch>")
if not torch.cuda.is_available():
    sys.exit("record-gpu.sh: PyTorch sees no CUDA GPU here (use --smoke to check the code path "
             "on a CPU)")
from mptutor import hardware

if hardware.device_override() == "cpu":
    sys.exit("record-gpu.sh: MPTUTOR_DEVICE=cpu hides the GPU from the benchmarks and the "
             "notebook; unset it to record GPU figures")
try:
    import torchvision  # noqa: F401
except ImportError:
    sys.exit("record-gpu.sh: the ResNet50 benchmarks need torchvision")
EOF
    out_dir="${out_dir:-$ROOT/data/results}"
    gemm_args=(--sizes 1024 2048 4096 8192)
    resnet_args=(--model resnet50 --batch 256 --channels-last)
    scaler_args=(--model resnet50 --batch 128)
fi
mkdir -p "$out_dir"
stamp="$(mktemp "${TMPDIR:-/tmp}/mptutor-record-stamp.XXXXXX")"
trap 'rm -f "$stamp"' EXIT

say "machine"
if [[ $smoke == 1 ]]; then
    run "$PYTHON" -c 'from mptutor import hardware; print(hardware.report())'
else  # through PyTorch, which names the GPUs and the CUDA version
    run "$PYTHON" -c 'import torch; from mptutor import hardware; print(hardware.report())'
fi

say "1/6 GEMM sweep"
run "$PYTHON" benchmarks/gemm_sweep.py "${gemm_args[@]}" --save --out-dir "$out_dir"
say "2/6 ResNet50 training: strict FP32, TF32, AMP FP16, AMP BF16; NCHW and channels_last"
run "$PYTHON" benchmarks/resnet50_amp.py "${resnet_args[@]}" --save --out-dir "$out_dir"
say "3/6 loss scaler and master weights against torch.amp.GradScaler"
run "$PYTHON" benchmarks/scaler_overhead.py "${scaler_args[@]}" --save --out-dir "$out_dir"

say "4/6 records of this run against the targets"
"$PYTHON" - "$out_dir" "$stamp" <<'EOF'
import sys
from pathlib import Path

from mptutor import bench

folder, stamp = Path(sys.argv[1]), Path(sys.argv[2])
new = [(p, r) for p, r in bench.find_records(results_dir=folder, include_smoke=True)
       if p.stat().st_mtime >= stamp.stat().st_mtime]
if len(new) < 3:
    sys.exit(f"expected 3 new records in {folder}, found {len(new)}")
for path, record in new:
    assert record["data"].get("rows") or record["data"].get("iteration_s"), path
    print(bench.provenance(path, record))
checks = bench.check_targets(new, every_target=False)
print(checks if len(checks) else "no target applies to the records of this run")
smoke = [p.name for p, r in new if r["data"].get("smoke")]
if smoke:
    print("smoke records (tiny runs, compared with no target):", ", ".join(smoke))
EOF

status=0
if [[ $checks == 1 && $smoke == 0 ]]; then
    say "5/6 tests marked gpu"
    if "$PYTHON" -c 'import pytest' 2>/dev/null; then
        MPTUTOR_REQUIRE_GPU=1 run "$PYTHON" -m pytest -p no:cacheprovider -q -m gpu \
            tests/test_tensor_cores.py tests/test_torch_perf.py tests/test_benchmarks.py \
            || status=1
    else
        echo "pytest is not installed for $PYTHON: skipped"
    fi
else
    say "5/6 tests marked gpu: skipped ($([[ $smoke == 1 ]] && echo "smoke run" || echo "--no-checks"))"
fi
if [[ $checks == 1 && ($smoke == 0 || $notebook_in_smoke == 1) ]]; then
    say "6/6 notebooks/pytorch/06-tensor-core-performance.ipynb as a script"
    run "$PYTHON" - notebooks/pytorch/06-tensor-core-performance.ipynb <<'EOF' || status=1
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.show = lambda *args, **kwargs: plt.close("all")  # no window to show figures in
path = sys.argv[1]
cells = [c for c in json.load(open(path, encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
namespace = {"__name__": "__main__"}
for number, cell in enumerate(cells, 1):
    exec(compile("".join(cell["source"]), f"{path}, code cell {number}", "exec"), namespace)
print(f"{path}: {len(cells)} code cells ran, every assertion held")
EOF
else
    say "6/6 notebook as a script: skipped ($([[ $checks == 0 ]] && echo "--no-checks" || echo "smoke run without --notebook"))"
fi

say "records are in $out_dir"
if [[ $smoke == 0 && "$out_dir" == "$ROOT/data/results" ]]; then
    echo "Re-execute the notebook with these records and commit both:"
    echo "    python -m mptutor.notebooks notebooks/pytorch/06-tensor-core-performance.ipynb --in-place"
fi
exit $status
