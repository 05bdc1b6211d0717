#!/usr/bin/env bash
# The GPU plan: everything this project measures and checks on a CUDA GPU, for a GPU host that
# is lent for a short window (15 minutes, its start included) and may have no network. Each
# window runs two commands and gives the host back:
#
#   bash benchmarks/gpu-plan.sh first OUT   # every headline figure, within 7 minutes
#   bash benchmarks/gpu-plan.sh next OUT    # if >= 5 minutes are left: the next nbval chunk
#
# Steps:
#   first OUT         within GPU_PLAN_FIRST_S (420 s), install included: the GEMM sweep, ResNet50
#                     training in the four modes at both layouts, the loss scaler's overhead and
#                     host syncs, the FP8 training step (the project's FP8 layers and torchao's
#                     recipes against BF16 autocast), then the `gpu` unit tests; each part is
#                     stopped at its own share of the time (below). OUT gets first.log, the four
#                     records, parts.tsv and summary.md (every figure against its target)
#   next OUT          strict nbval of the notebooks of the GPU path (the PyTorch notebooks;
#                     keras/02 imports TensorFlow, which a GPU host lacks) that the ledger
#                     (data/results/ledger/gpu-ledger.json) says are due, those that show GPU
#                     figures first, as many as fit in GPU_PLAN_NEXT_S (420 s) with the install;
#                     the updated ledger goes to OUT/gpu-ledger.json (commit it in its place)
#   wheelhouse [DIR]  on a machine with a network: download what `install` needs into
#                     wheelhouse/ (Python 3.12, manylinux x86-64; only pip is needed)
#   install           .venv-gpu-host on top of PYTHON (its PyTorch, NumPy and pytest kept) with
#                     requirements-gpu-host.txt from wheelhouse/, offline (pip --no-index);
#                     `first` and `next` do it first when it is not done yet
#   check OUT         the machine: hardware report, nvidia-smi, versions (seconds)
#   keras OUT         benchmarks/keras_cnn_experiment.py on Keras's PyTorch backend (the record
#                     keras/02 shows; not part of a window's two commands; the notebook itself
#                     is not on the GPU path)
#   nbval OUT NB...   strict nbval of the notebooks named (no ledger)
#
# Environment:
#   PYTHON            the host's Python with CUDA PyTorch (default python3)
#   MPTUTOR_COMMIT    the commit being measured, stored in every record and ledger entry (no
#                     .git travels)
#   GPU_PLAN_FIRST_S, GPU_PLAN_NEXT_S  seconds for `first` and `next` (default 420 each; give
#                     `next` what is left of the window less a minute)
#   GPU_PLAN_LIMIT_S  seconds for the other steps (default 420)
#   GPU_PLAN_LEDGER   the ledger `next` resumes from (default: the committed one above)
#   GPU_PLAN_INDEX=1  let `install` use the package index when wheelhouse/ is missing
#   GPU_PLAN_WHEELHOUSE, GPU_PLAN_VENV  other folders for wheelhouse/ and .venv-gpu-host
#   GPU_PLAN_REHEARSE=1  rehearse on a machine without a GPU: `first` runs at --smoke sizes on the
#                     CPU (the `gpu` tests skip), `next` runs nbval on the CPU path and its
#                     ledger entries name no GPU (a notebook stays due until a GPU passes it)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
LIMIT="${GPU_PLAN_LIMIT_S:-420}"
REHEARSE="${GPU_PLAN_REHEARSE:-0}"
WHEELHOUSE="${GPU_PLAN_WHEELHOUSE:-$ROOT/wheelhouse}"
GPU_VENV="${GPU_PLAN_VENV:-$ROOT/.venv-gpu-host}"
LEDGER="${GPU_PLAN_LEDGER:-$ROOT/data/results/ledger/gpu-ledger.json}"
GPU_PY="$GPU_VENV/bin/python"
STAMP="$GPU_VENV/.installed"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
NBVAL=(-p no:cacheprovider --nbval --nbval-current-env
       --nbval-sanitize-with tests/nbval-sanitize.cfg --nbval-cell-timeout=400)

# The parts of `first` and each one's share of its 420 s, in the order they run. A part may also
# use what the parts before it left unused, never the shares of the parts after it; the benchmark
# scripts get 80% of their part's time as --budget-s (they start no unit of work that would not
# fit, and save what they measured), `timeout` stops the part at 100%. The shares come from the
# part durations measured in the two GPU windows (H200, 2026-11-27; `first` took 356 and 410 of
# its 420 s), never from the figures measured. In both windows the resnet50 part ran strict FP32
# first: its run was the slowest, and as the estimate of every mode not yet run it kept the AMP
# modes (the headline targets) from starting. So the AMP modes run first now, then FP32 and TF32
# (the baselines of the ratios); a direct run in that order, at 3 + 20 steps, measured all four
# in channels_last in 125 s, start-up and Python's included (data/results/logs/
# 2026-11-27-h200-window2/direct-runs.md):
#   install   35  pip --no-index of the wheelhouse (~29 MiB, 70 wheels) into .venv-gpu-host:
#                 34 s and 28 s in the windows
#   machine   15  hardware report and nvidia-smi (importing PyTorch): 10 s and 11 s
#   gemm      25  5 precisions x 4 sizes, each n and n - 1, 8192^3 first: all of them in 21 s and
#                 22 s (part included)
#   resnet50 165  an untimed start-up run at batch 8 (CUDA context, cuDNN and cuBLAS loading:
#                 10-16 s when it runs first; the first window's first measured run took 78 s
#                 without it), then runs of 5 warm-up + 30 timed steps at batch 256, AMP FP16,
#                 AMP BF16, strict FP32, TF32 in channels_last, then NCHW. cuDNN autotuning and
#                 building the model take most of a run: TF32 in NCHW took 29 s in the second
#                 window; strict FP32 in channels_last, the first run after the start-up there,
#                 took over 44 s (the budget's reasons in its log); the direct run's four took
#                 at most 110 s together (its 125 s less its 15.5 s start-up). So the start-up and the four channels_last runs fit, NCHW
#                 mostly not
#   scaler    45  ResNet50 at batch 128 in FP16, 2 trainers x (5 warm-up + 5 rounds x 10) steps,
#                 plus building two models and counting host syncs: 34 s and 37 s; now also one
#                 profiled optimizer part per trainer (a few seconds, CUPTI's start included)
#   fp8       70  2 widths x 4 variants x (3 warm-up + 25) steps: 123 s of 164 given in the first
#                 window (the compiled width-4096 unit not started), all of its 121 s in the
#                 second (the eager units only); with 70 s it measures what fits, eager first,
#                 and records the rest as not started
#   tests     60  the `gpu`-marked unit tests (tiny sizes) and their collection: 41 s in the first
#                 window (the tests after the first failed fast there, a leak since fixed), 45 s
#                 stopped in the second, where all of them took 48 s in a separate run
#                 (38 s by pytest's count, collection excluded; direct-runs.md)
#   summary    5  targets.py --summary over the records: 1 s and 0 s
# A part may use what the parts before it left unused, so resnet50 also gets what install,
# machine and gemm did not spend. In a CPU rehearsal at --smoke sizes on a 2-core machine
# (GPU_PLAN_REHEARSE=1, nothing to install) the fixed costs were: machine 19 s, gemm 20 s,
# resnet50 29 s, scaler 25 s, fp8 31 s (torchao's recipes included), tests 23 s, summary 1 s.
FIRST_PARTS=(install machine gemm resnet50 scaler fp8 tests summary)
FIRST_SHARES=(35 15 25 165 45 70 60 5)

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "gpu-plan.sh: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
step="$1"
shift
case "$step" in
    -h | --help) usage; exit 0 ;;
    wheelhouse | install) out="" ;;
    first | next | check | keras | nbval)
        [[ $# -ge 1 ]] || die "step '$step' needs an output folder: gpu-plan.sh $step OUT_DIR"
        out="$1"
        shift
        ;;
    *) die "unknown step '$step' (see --help)" ;;
esac
case "$step" in
    first) LIMIT="${GPU_PLAN_FIRST_S:-420}" ;;
    next) LIMIT="${GPU_PLAN_NEXT_S:-420}" ;;
esac
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
    timeout --kill-after=5 "$left" "$@" || rc=$?
    if ((rc == 124 || rc == 137)); then
        echo "stopped after the step's $LIMIT s: $*"
    fi
    ((rc == 0)) || failed+=("$* (exit $rc)")
}
finish() {
    say "$step: $((SECONDS - started)) s of $LIMIT s"
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
    "$GPU_PY" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-compile \
        "${source[@]}" \
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

# `first`: run part number $1 (a function named part_<name>) within its time: the seconds left of
# the step less the shares of the parts after it. The function reads $PART_S (its time) and
# $SCRIPT_S (80% of it, for --budget-s); `timeout` stops it at $PART_S. One line per part goes
# to OUT/parts.tsv: part, share, time given, time taken, outcome.
part() {
    local i=$1 name=${FIRST_PARTS[$1]} later=0 j
    for ((j = i + 1; j < ${#FIRST_PARTS[@]}; j++)); do later=$((later + FIRST_SHARES[j])); done
    PART_S=$((LIMIT - (SECONDS - started) - later))
    ((PART_S > 0)) || PART_S=0
    SCRIPT_S=$((PART_S * 4 / 5))
    export PART_S SCRIPT_S
    say "$name: ${FIRST_SHARES[$i]} s share, $PART_S s given"
    local t0=$SECONDS rc=0 outcome=ok
    if ((PART_S < 5)); then
        outcome="not started: no time left"
        failed+=("$name (no time left)")
    else
        # a function cannot be given to `timeout`: the part runs in a subshell of this script
        timeout --kill-after=5 "$PART_S" \
            bash -c "set -euo pipefail; eval \"\$PART_DEFS\"; part_$name" || rc=$?
        if ((rc == 124 || rc == 137)); then
            outcome="stopped at its $PART_S s"
        elif ((rc != 0)); then
            outcome="exit $rc"
        fi
        ((rc == 0)) || failed+=("$name ($outcome)")
    fi
    echo "$name: $((SECONDS - t0)) s ($outcome)"
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${FIRST_SHARES[$i]}" "$PART_S" "$((SECONDS - t0))" \
        "$outcome" >>"$out/parts.tsv"
}
part_install() { install; }
part_machine() { machine; }
part_gemm() {
    "$GPU_PY" benchmarks/gemm_sweep.py "${smoke[@]}" --budget-s "$SCRIPT_S" --out "$out"
}
part_resnet50() {
    local steps=(--steps 30 --warmup 5)
    [[ $REHEARSE == 1 ]] && steps=()
    # the headline modes first, then the baselines of their ratios (see the shares above)
    "$GPU_PY" benchmarks/resnet50_amp.py "${smoke[@]}" "${steps[@]}" --budget-s "$SCRIPT_S" \
        --modes amp_fp16 amp_bf16 fp32 tf32 --out "$out"
}
part_scaler() {
    "$GPU_PY" benchmarks/scaler_overhead.py "${smoke[@]}" --budget-s "$SCRIPT_S" --out "$out"
}
part_fp8() {
    "$GPU_PY" benchmarks/fp8_step.py "${smoke[@]}" --budget-s "$SCRIPT_S" \
        --variants bf16 fp8 torchao_tensorwise torchao_rowwise --out "$out"
}
part_tests() {
    local gpu_flag=1
    [[ $REHEARSE == 1 ]] && gpu_flag=0
    # only the files that hold `gpu` tests: collecting the others would import what they test
    mapfile -t files < <(grep -l 'mark\.gpu' tests/test_*.py)
    MPTUTOR_REQUIRE_GPU=$gpu_flag MPTUTOR_REQUIRE_FRAMEWORKS=torch \
        "$GPU_PY" -m pytest -p no:cacheprovider -q -m gpu -ra "${files[@]}"
}
part_summary() {
    "$GPU_PY" benchmarks/targets.py --summary "$out/summary.md" --parts "$out/parts.tsv" "$out"
}

smoke=()
[[ $REHEARSE == 1 ]] && smoke=(--smoke)
case "$step" in
    wheelhouse)
        dest="${1:-$WHEELHOUSE}"
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
        echo "wheels: $(ls "$dest" | wc -l), $(du -sb "$dest" | cut -f1) bytes"
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
    first)
        need_gpu
        rm -f "$out/parts.tsv"
        export GPU_PY REHEARSE out PYTHON WHEELHOUSE GPU_VENV STAMP
        PART_DEFS="$(declare -p smoke; declare -f install _install_key _needed machine say die \
            $(printf 'part_%s ' "${FIRST_PARTS[@]}"))"
        export PART_DEFS
        for i in "${!FIRST_PARTS[@]}"; do
            part "$i"
            # the install may find that PYTHON has everything: the later parts use it then
            [[ $i == 0 && ! -x "$GPU_VENV/bin/python" ]] && GPU_PY="$PYTHON"
        done
        echo "the parts (OUT/parts.tsv):"
        if command -v column >/dev/null; then column -t -s $'\t' "$out/parts.tsv"
        else cat "$out/parts.tsv"; fi  # the GPU host has no `column`
        ;;
    next)
        need_gpu
        install
        left=$((LIMIT - (SECONDS - started) - 10))
        ((left >= 30)) || die "only $left s are left for nbval after the install"
        say "strict nbval of the notebooks due (ledger $LEDGER), within $left s"
        retry=()
        [[ "${GPU_PLAN_RETRY_FAILED:-0}" == 1 ]] && retry=(--retry-failed)
        run "$GPU_PY" benchmarks/ledger.py next "$out" --budget-s "$left" --ledger "$LEDGER" \
            --python "$GPU_PY" "${retry[@]}"
        ;;
    keras)
        need_gpu
        install
        machine
        run env KERAS_BACKEND=torch "$GPU_PY" benchmarks/keras_cnn_experiment.py "${smoke[@]}" \
            --backend-note "Keras on the PyTorch backend, benchmarks/gpu-plan.sh keras" --out "$out"
        ;;
    nbval)
        need_gpu
        install
        machine
        [[ $# -ge 1 ]] || die "step 'nbval' needs the notebooks to check"
        run env KERAS_BACKEND=torch "$GPU_PY" -m pytest "${NBVAL[@]}" "$@"
        ;;
esac
finish
