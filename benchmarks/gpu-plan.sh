#!/usr/bin/env bash
# The GPU plan: everything this project measures and checks on a CUDA GPU, as steps of a few
# minutes each that need neither make nor a network.
#
#   bash benchmarks/gpu-plan.sh STEP OUT_DIR [NOTEBOOK ...]
#
# Each step writes its log (OUT_DIR/STEP.log) and any records into OUT_DIR, stops its commands
# after GPU_PLAN_LIMIT_S seconds (default 470, under 8 minutes), and can run in any order and on
# a fresh machine: the steps that need more than the host's own PyTorch install it first (the
# `install` step, skipped when already done). Records never go to data/results/: copy them
# there, re-execute the notebooks that show them and commit both.
#
# Steps:
#   wheelhouse [DIR]  on a machine with a network: download what `install` needs into
#                     wheelhouse/ (Python 3.12, manylinux x86-64; only pip is needed)
#   install [OUT]     .venv-gpu-host on top of PYTHON (its PyTorch, NumPy and pytest kept) with
#                     requirements-gpu-host.txt from wheelhouse/, offline (pip --no-index);
#                     every step below does it first when it is not done yet (~30 s)
#   check OUT         the machine: hardware report, nvidia-smi, versions (seconds)
#   records OUT       benchmarks/gemm_sweep.py, resnet50_amp.py (both layouts) and
#                     scaler_overhead.py, each writing its record into OUT
#   fp8 OUT           benchmarks/fp8_step.py: an FP8 training step against BF16 autocast
#   keras OUT         benchmarks/keras_cnn_experiment.py on Keras's PyTorch backend
#   tests OUT         the unit tests in this environment, the `gpu` ones included (a missing GPU
#                     is an error), TensorFlow and MXNet tests skipping
#   nbval-a OUT       strict nbval of notebooks/pytorch/00-05 on the GPU path
#   nbval-b OUT       strict nbval of notebooks/pytorch/06 and later
#   nbval OUT NB...   strict nbval of the notebooks named
#
# Environment:
#   PYTHON            the host's Python with CUDA PyTorch (default python3)
#   MPTUTOR_COMMIT    the commit being measured, stored in every record (no .git travels)
#   GPU_PLAN_LIMIT_S  seconds per step (default 470)
#   GPU_PLAN_INDEX=1  let `install` use the package index when wheelhouse/ is missing
#   GPU_PLAN_WHEELHOUSE, GPU_PLAN_VENV  other folders for wheelhouse/ and .venv-gpu-host
#   GPU_PLAN_REHEARSE=1  rehearse on a machine without a GPU: records steps run tiny (--smoke)
#                     on the CPU, tests and nbval take the CPU path (MPTUTOR_REQUIRE_GPU=0)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
LIMIT="${GPU_PLAN_LIMIT_S:-470}"
REHEARSE="${GPU_PLAN_REHEARSE:-0}"
WHEELHOUSE="${GPU_PLAN_WHEELHOUSE:-$ROOT/wheelhouse}"
GPU_VENV="${GPU_PLAN_VENV:-$ROOT/.venv-gpu-host}"
GPU_PY="$GPU_VENV/bin/python"
STAMP="$GPU_VENV/.installed"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
NBVAL=(-p no:cacheprovider --nbval --nbval-current-env
       --nbval-sanitize-with tests/nbval-sanitize.cfg --nbval-cell-timeout=400)

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "gpu-plan.sh: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
step="$1"
shift
case "$step" in
    -h | --help) usage; exit 0 ;;
    wheelhouse | install) out="${1:-}" ;;
    check | records | fp8 | keras | tests | nbval-a | nbval-b | nbval)
        [[ $# -ge 1 ]] || die "step '$step' needs an output folder: gpu-plan.sh $step OUT_DIR"
        out="$1"
        ;;
    *) die "unknown step '$step' (see --help)" ;;
esac
[[ $# -ge 1 ]] && shift
if [[ -n "$out" ]]; then
    mkdir -p "$out"
    out="$(cd "$out" && pwd)"
    exec > >(tee -a "$out/$step.log") 2>&1
fi

started=$SECONDS
failed=()
say() { printf '\n== %s\n' "$*"; }
# Run a command, stopped when the step's time is up; a failure is noted and the step goes on.
run() {
    local left=$((LIMIT - (SECONDS - started)))
    if ((left < 10)); then
        echo "skipped, the step's $LIMIT s are up: $*"
        failed+=("$1 (no time left)")
        return 0
    fi
    printf '+ %s\n' "$*"
    local rc=0
    timeout --kill-after=15 "$left" "$@" || rc=$?
    if ((rc == 124 || rc == 137)); then
        echo "stopped after the step's $LIMIT s: $*"
    fi
    ((rc == 0)) || failed+=("$* (exit $rc)")
}
finish() {
    say "$step: $((SECONDS - started)) s"
    if ((${#failed[@]})); then
        printf 'failed: %s\n' "${failed[@]}"
        exit 1
    fi
    echo "all commands passed"
}

need_gpu() {
    [[ $REHEARSE == 1 ]] && return 0
    "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
        || die "PyTorch at $PYTHON sees no CUDA GPU (GPU_PLAN_REHEARSE=1 rehearses on a CPU)"
}

install() {
    if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(_install_key)" ]]; then
        echo "$GPU_VENV is installed"
        return 0
    fi
    if "$PYTHON" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))' $(_needed) 2>/dev/null; then
        echo "PYTHON=$PYTHON has what the plan needs: nothing to install"
        GPU_PY="$PYTHON"
        return 0
    fi
    local source=(--no-index --find-links "$WHEELHOUSE")
    if ! compgen -G "$WHEELHOUSE/*.whl" >/dev/null; then
        if [[ "${GPU_PLAN_INDEX:-0}" == 1 ]]; then
            source=()
        else
            die "wheelhouse/ holds no wheels, and an offline GPU host cannot reach the package \
index. On a machine with a network run 'bash benchmarks/gpu-plan.sh wheelhouse' (or \
'make wheelhouse') and bring wheelhouse/ along; or set GPU_PLAN_INDEX=1 where the index is reachable."
        fi
    fi
    "$PYTHON" -c 'import torch' 2>/dev/null \
        || die "PYTHON=$PYTHON has no PyTorch; set PYTHON to the host's Python with CUDA PyTorch"
    rm -rf "$GPU_VENV"
    "$PYTHON" -m venv --system-site-packages --without-pip "$GPU_VENV"
    # PYTHON may itself be a virtual environment: its site-packages come in through a .pth file.
    "$PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))' \
        >"$("$GPU_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-site-packages.pth"
    "$GPU_PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir "${source[@]}" \
        -r requirements-gpu-host.txt
    KERAS_BACKEND=torch "$GPU_PY" -c 'import torch, nbval, ipykernel, keras
print("installed beside torch", torch.__version__, "from", torch.__file__)'
    _install_key >"$STAMP"
}
_install_key() { printf '%s %s\n' "$PYTHON" "$(cksum <requirements-gpu-host.txt)"; }
# The import names of requirements-gpu-host.txt.
_needed() { sed -e 's/#.*//' -e 's/[<>=!~;[ ].*//' requirements-gpu-host.txt | tr '-' '_' | grep .; }

machine() {
    say "machine"
    "$GPU_PY" -c 'import torch; from mptutor import hardware; print(hardware.report())'
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu,clocks_event_reasons.active \
            --format=csv || true
    fi
    echo "commit: ${MPTUTOR_COMMIT:-unknown (set MPTUTOR_COMMIT)}; rehearsal: $REHEARSE"
}

smoke=()
[[ $REHEARSE == 1 ]] && smoke=(--smoke)
case "$step" in
    wheelhouse)
        dest="${out:-$WHEELHOUSE}"
        say "wheels for Python 3.12 on manylinux x86-64 into $dest"
        rm -rf "$dest"
        platforms=()
        for tag in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_24_x86_64 \
            manylinux_2_27_x86_64 manylinux_2_28_x86_64 manylinux_2_31_x86_64 \
            manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
            platforms+=(--platform "$tag")
        done
        "${WHEELHOUSE_PIP:-python3}" -m pip download --quiet --disable-pip-version-check \
            --only-binary :all: --python-version 3.12 --implementation cp "${platforms[@]}" \
            -r requirements-gpu-host.txt -c requirements.txt -d "$dest"
        # the GPU host brings NumPy with its PyTorch
        rm -f "$dest"/numpy-*.whl
        du -sh "$dest"
        echo "wheels: $(ls "$dest" | wc -l)"
        exit 0
        ;;
    install)
        install
        exit 0
        ;;
    check)
        install
        machine
        ;;
    records)
        need_gpu
        install
        machine
        say "GEMM sweep: strict FP32, TF32, FP16, BF16, FP8 at 1024..8192 and n - 1"
        run "$GPU_PY" benchmarks/gemm_sweep.py "${smoke[@]}" --out "$out"
        say "ResNet50 training: strict FP32, TF32, AMP FP16, AMP BF16; NCHW and channels_last"
        run "$GPU_PY" benchmarks/resnet50_amp.py "${smoke[@]}" --out "$out"
        say "master weights and loss scaler against torch.amp.GradScaler"
        run "$GPU_PY" benchmarks/scaler_overhead.py "${smoke[@]}" --out "$out"
        say "these records against the targets"
        run "$GPU_PY" benchmarks/targets.py "$out"
        ;;
    fp8)
        need_gpu
        [[ -f benchmarks/fp8_step.py ]] || die "benchmarks/fp8_step.py is not in this checkout"
        install
        machine
        run "$GPU_PY" benchmarks/fp8_step.py "${smoke[@]}" --out "$out"
        run "$GPU_PY" benchmarks/targets.py "$out"
        ;;
    keras)
        need_gpu
        install
        machine
        run env KERAS_BACKEND=torch "$GPU_PY" benchmarks/keras_cnn_experiment.py "${smoke[@]}" \
            --backend-note "Keras on the PyTorch backend, benchmarks/gpu-plan.sh keras" --out "$out"
        ;;
    tests)
        need_gpu
        install
        machine
        if [[ $REHEARSE == 1 ]]; then gpu_flag=0; else gpu_flag=1; fi
        run env MPTUTOR_REQUIRE_GPU=$gpu_flag MPTUTOR_REQUIRE_FRAMEWORKS=torch \
            "$GPU_PY" -m pytest -p no:cacheprovider -q tests
        ;;
    nbval-a | nbval-b | nbval)
        need_gpu
        install
        machine
        if [[ $step == nbval-a ]]; then
            notebooks=(notebooks/pytorch/0[0-5]-*.ipynb)
        elif [[ $step == nbval-b ]]; then
            notebooks=()
            for nb in notebooks/pytorch/*.ipynb; do
                [[ $(basename "$nb") < 06 ]] || notebooks+=("$nb")
            done
        else
            [[ $# -ge 1 ]] || die "step 'nbval' needs the notebooks to check"
            notebooks=("$@")
        fi
        run "$GPU_PY" -m pytest "${NBVAL[@]}" "${notebooks[@]}"
        ;;
esac
finish
