# mptutor: every notebook runs in the environment of its framework.
#
#   .venv        the main environment (requirements.txt): PyTorch and TensorFlow/Keras,
#                notebooks/pytorch and notebooks/keras
#   .venv-mxnet  the MXNet environment (requirements-mxnet.txt): MXNet 1.9.1 with NumPy 1.23.5,
#                notebooks/gluon
#
#   make test        create both environments on first use, run the unit tests in each, then
#                    strict nbval over every notebook in its framework's environment; the unit
#                    tests build the site and open it in Chromium (tests/test_site.py)
#   make run         execute every notebook into build/<track>/ (.ipynb + .html) with a summary
#                    and build them into a site, build/site/index.html
#   make site        the site from the committed notebooks (landing page, a page per notebook,
#                    API reference, search; offline) in build/site/; docs/build_site.py
#   make notebooks   re-execute the committed notebooks in place
#   make test-gpu PYTHON=/path/to/python
#                    on a GPU host that brings its own CUDA PyTorch: a window's two commands of
#                    benchmarks/gpu-plan.sh, `first` (every headline figure, the `gpu` tests) and
#                    `next` (the next chunk of strict nbval from the ledger); README, "GPU plan"
#   make wheelhouse  download what the GPU host installs (Python 3.12), for an offline host
#   make lab         JupyterLab in the main environment
#   make lint        ruff over the package, tests, benchmarks and notebooks

PYTHON ?= python3
# The MXNet environment needs Python 3.11: mxnet 1.9.1 needs NumPy 1.23.5, which has no wheels
# for Python 3.12 or later, and the notebook tools pinned beside it need 3.11. MXNET_PYTHON is
# PYTHON when that is 3.11, else python3.11 on the PATH, else a 3.11 that pyenv has installed
# (one without ensurepip, which cannot make environments, does not count), else empty: then
# `make run` runs the other tracks and says why the Gluon track did not run, and `make test`
# stops with that reason. Name one yourself with MXNET_PYTHON=/path/to/python3.11.
IS_PY311 := -c 'import sys, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))'
MXNET_PYTHON ?= $(shell for py in $(PYTHON) python3.11 \
    $$(ls -d "$$(pyenv root 2>/dev/null)"/versions/3.11*/bin/python3.11 2>/dev/null); do \
    "$$py" $(IS_PY311) 2>/dev/null && { "$$py" -c 'import sys; print(sys.executable)'; break; }; \
    done)
NO_MXNET_PYTHON = no Python 3.11 found for the MXNet environment ($(MXNET_VENV)), which \
    $(MXNET_NOTEBOOKS) needs: PYTHON=$(PYTHON) is not 3.11, and neither python3.11 on the PATH nor \
    pyenv has one. mxnet 1.9.1 needs NumPy 1.23.5, which has no wheels for newer Pythons. Install \
    Python 3.11 (e.g. pyenv install 3.11) or name one: make ... MXNET_PYTHON=/path/to/python3.11

MAIN_VENV := .venv
MXNET_VENV := .venv-mxnet
MAIN_PY := $(MAIN_VENV)/bin/python
MXNET_PY := $(MXNET_VENV)/bin/python
MAIN_STAMP := $(MAIN_VENV)/.installed
MXNET_STAMP := $(MXNET_VENV)/.installed

# What each environment is meant to hold. Under `make test` a framework listed here that does
# not import is an error, never a skip (tests/conftest.py reads MPTUTOR_REQUIRE_FRAMEWORKS).
MAIN_FRAMEWORKS := torch,tensorflow,keras
MXNET_FRAMEWORKS := mxnet
# Which notebooks run in which environment.
MAIN_NOTEBOOKS := notebooks/pytorch notebooks/keras
MXNET_NOTEBOOKS := notebooks/gluon
# Both lanes of `make test` and `make run` compute on one thread each: every notebook is held by
# one core (pytorch/10 took 77.5 s under strict nbval on one thread and 78.6 s on two, both alone
# on the 2-core AVX512-BF16 EPYC), and two jobs that each start a thread per core on two cores
# make every small operation wait for a core (pytorch/11 took 151 s beside a busy loop with two
# threads, 31 s with one). Their compared outputs are the same on one thread or two.
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TF_NUM_INTRAOP_THREADS=1
# gluon/02, the longest notebook, runs alone, after the lanes, on every core: told nothing, MXNet
# 1.9 computed on one thread of the 2-core Xeon (a ResNet-50 v2 training step at 32 px: 0.65 s;
# 0.62 s with OMP_NUM_THREADS=1, 0.30 s with 2), and under strict nbval gluon/02 took 226 s alone
# on two threads there, against 483 s on one thread in a lane (on the 2-core AVX512-BF16 EPYC two
# threads made no difference: 198 s against 196 s).
ALL_THREADS := OMP_NUM_THREADS=$(shell nproc 2>/dev/null || echo 1)
# The main environment's notebooks that share the two cores with one other job: every one whose
# lesson times nothing (no claim compares speeds). Named by number; a notebook not named here, a
# new one included, runs alone, after the lanes, as do those whose lessons time something
# (pytorch/00, 06, keras/02). The lanes are balanced by the times of a fresh clone's `make test`
# on the 2-core Xeon with AMX, where the MXNet environment's unit tests and gluon/01 (92 s and 45
# s) end at about the time the main environment is made: under `make test` TEST_AFTER_GLUON run in
# the MXNet environment's lane after them, the others after the main unit tests (318 s) in the
# main lane; under `make run`, which has no unit tests, RUN_AFTER_GLUON follow gluon/01, the others
# run beside them.
notebooks_named = $(foreach n,$(1),$(wildcard notebooks/$(n)-*.ipynb))
SHARED_NOTEBOOKS := $(call notebooks_named,pytorch/01 pytorch/02 pytorch/03 pytorch/04 \
    pytorch/05 pytorch/07 pytorch/08 pytorch/09 pytorch/10 pytorch/11 pytorch/12 keras/01 keras/03)
TEST_AFTER_GLUON := $(call notebooks_named,pytorch/01 pytorch/02 pytorch/04 pytorch/05 \
    pytorch/07 pytorch/08 pytorch/09 pytorch/10 pytorch/11 pytorch/12 keras/03)
RUN_AFTER_GLUON := $(call notebooks_named,pytorch/01 pytorch/04 pytorch/05 pytorch/07 \
    pytorch/08 pytorch/09 pytorch/10 pytorch/11)
# The Gluon track: gluon/01 in the MXNet environment's lane, the rest alone on every core.
MXNET_SHARED_NOTEBOOKS := $(call notebooks_named,gluon/01)
MXNET_ALONE_NOTEBOOKS = $(filter-out $(MXNET_SHARED_NOTEBOOKS),\
    $(sort $(wildcard $(MXNET_NOTEBOOKS)/*.ipynb)))
ALONE_NOTEBOOKS = $(filter-out $(SHARED_NOTEBOOKS),\
    $(foreach d,$(MAIN_NOTEBOOKS),$(sort $(wildcard $(d)/*.ipynb))))

# Seconds each notebook may take on the slowest CI machine; both `make test` and `make run` print
# every notebook's time beside its budget, and fail on one over budget under CI=true or
# MPTUTOR_BUDGETS=1 (MPTUTOR_BUDGETS=0 only prints them). See mptutor/notebooks.py.
BUDGETS := notebooks/budgets.json
NBVAL := -p no:cacheprovider --nbval --nbval-current-env \
         --nbval-sanitize-with tests/nbval-sanitize.cfg --nbval-cell-timeout=900 \
         -p mptutor.notebooks --notebook-budgets $(BUDGETS)
# Quiet the frameworks' C++ start-up logs in every process that make starts.
export TF_CPP_MIN_LOG_LEVEL ?= 3
# TensorFlow's own kernels, not its oneDNN ones: on CPUs with AVX512-FP16 (Intel Sapphire Rapids
# and later) a mixed_float16 Dense training step took about 600 ms through oneDNN against 4 ms
# without it, and oneDNN's results depend on the CPU's instruction set, which strict nbval compares.
export TF_ENABLE_ONEDNN_OPTS ?= 0

# GPU hosts: benchmarks/gpu-plan.sh does the work; its logs go to $(GPU_OUT).
GPU_OUT ?= build/gpu
# Set to 0 only to rehearse `make test-gpu` on a machine without a GPU.
MPTUTOR_REQUIRE_GPU ?= 1
GPU_PLAN := PYTHON=$(PYTHON) GPU_PLAN_REHEARSE=$(if $(filter 0,$(MPTUTOR_REQUIRE_GPU)),1,0) \
            bash benchmarks/gpu-plan.sh

.PHONY: venvs test test-unit test-notebooks run site notebooks test-gpu wheelhouse lab lint clean

# pip writes the bytecode of every file it installs (about a third of the main environment's
# install time). Not with --no-compile: Python would then compile each module the first time it is
# imported, and a package's invalid escape sequences would warn there, which pytest's
# filterwarnings = error turns into a failed import (mptutor.torch.import_torchao explains one).
PIP_INSTALL := --quiet --disable-pip-version-check
# The two environments are made side by side (pip waits on downloads and disk as much as on the
# CPU); each stamp is a file target, so a made environment is reused.
venvs:
	@$(MAKE) --no-print-directory -j2 $(MAIN_STAMP) $(MXNET_STAMP)

$(MAIN_STAMP): requirements.txt pyproject.toml
	@test -x $(MAIN_PY) || $(PYTHON) -m venv $(MAIN_VENV)
	$(MAIN_PY) -m pip install $(PIP_INSTALL) -r requirements.txt
	$(MAIN_PY) -m pip install $(PIP_INSTALL) --no-deps -e .
	@touch $@

$(MXNET_STAMP): requirements-mxnet.txt pyproject.toml
	@test -x $(MXNET_PY) || { py='$(MXNET_PYTHON)'; \
	    test -n "$$py" || { echo "error: $(NO_MXNET_PYTHON)" >&2; exit 2; }; \
	    "$$py" $(IS_PY311) || { echo "error: MXNET_PYTHON=$$py is not a Python 3.11 with venv and ensurepip" >&2; exit 2; }; \
	    echo "creating $(MXNET_VENV) with $$py"; "$$py" -m venv $(MXNET_VENV); }
	$(MXNET_PY) -m pip install $(PIP_INSTALL) -r requirements-mxnet.txt
	$(MXNET_PY) -m pip install $(PIP_INSTALL) --no-deps -e .
	@touch $@

# `make test` keeps both cores of a 2-core machine busy in two lanes, each on one thread
# (ONE_THREAD, above), and starts each lane as soon as its environment is made: the MXNet
# environment is made in about a third of the main one's time (73 s against 183 s in a fresh
# clone on the 2-core Xeon), so its lane begins while pip still fills the main one. The MXNet
# environment's lane: its unit tests, strict nbval of gluon/01, then, once the main environment is
# made, TEST_AFTER_GLUON; its log is printed when the lanes are done. The main environment's lane,
# beside it: its unit tests, whose report comes first, then strict nbval of the shared notebooks not
# in TEST_AFTER_GLUON. The lanes are targets of a `make -j2 -k` (test-lanes) that write their exit
# status to TEST_STATUS. Then the notebooks that run alone, the Gluon ones last, on every core.
# Every part runs even if another failed; the exit status is non-zero if any part failed or did not
# run. Budgets are wall-clock seconds: no notebook shares the machine with more than one other job,
# and those that run alone share it with none.
MXNET_LANE_LOG := build/test-mxnet-environment.log
TEST_STATUS := build/test-status
TEST_PARTS := main-unit main-shared mxnet-unit gluon-01 after-gluon
test:
	@test -x $(MXNET_PY) || test -n '$(MXNET_PYTHON)' || { echo "error: $(NO_MXNET_PYTHON)" >&2; exit 2; }
	@rm -rf $(TEST_STATUS) && mkdir -p $(TEST_STATUS)
	-@$(MAKE) --no-print-directory -j2 -k test-lanes
	@echo "== $(MXNET_VENV): unit tests, strict nbval of $(MXNET_SHARED_NOTEBOOKS), then of the shared notebooks that follow it, run beside the above =="; \
	cat $(MXNET_LANE_LOG); \
	echo "== $(MAIN_VENV): strict nbval of the notebooks that run alone =="; \
	$(MAIN_PY) -m pytest $(NBVAL) $(ALONE_NOTEBOOKS); alone_rc=$$?; \
	echo "== $(MXNET_VENV): strict nbval of the Gluon notebooks that run alone, on every core =="; \
	$(ALL_THREADS) $(MXNET_PY) -m pytest $(NBVAL) $(MXNET_ALONE_NOTEBOOKS); gluon_rc=$$?; \
	rc=0; for part in $(TEST_PARTS); do \
	    test "$$(cat $(TEST_STATUS)/$$part 2>/dev/null)" = 0 || { rc=1; \
	    echo "make test: $$part failed or did not run (exit $$(cat $(TEST_STATUS)/$$part 2>/dev/null || echo none))" >&2; }; done; \
	test $$alone_rc -eq 0 && test $$gluon_rc -eq 0 && test $$rc -eq 0

.PHONY: test-lanes test-lane-main test-lane-mxnet test-lane-after-gluon
test-lanes: test-lane-main test-lane-after-gluon

test-lane-main: $(MAIN_STAMP)
	@$(ONE_THREAD) MPTUTOR_REQUIRE_FRAMEWORKS=$(MAIN_FRAMEWORKS) $(MAIN_PY) -m pytest \
	    -p no:cacheprovider --durations=10 tests; echo $$? >$(TEST_STATUS)/main-unit; \
	echo "== $(MAIN_VENV): strict nbval of the shared notebooks that follow its unit tests =="; \
	$(ONE_THREAD) $(MAIN_PY) -m pytest $(NBVAL) $(filter-out $(TEST_AFTER_GLUON),$(SHARED_NOTEBOOKS)); \
	echo $$? >$(TEST_STATUS)/main-shared

test-lane-mxnet: $(MXNET_STAMP)
	@{ $(ONE_THREAD) MPTUTOR_REQUIRE_FRAMEWORKS=$(MXNET_FRAMEWORKS) $(MXNET_PY) -m pytest \
	      -p no:cacheprovider --durations=10 tests; echo $$? >$(TEST_STATUS)/mxnet-unit; \
	  $(ONE_THREAD) $(MXNET_PY) -m pytest $(NBVAL) $(MXNET_SHARED_NOTEBOOKS); \
	  echo $$? >$(TEST_STATUS)/gluon-01; } >$(MXNET_LANE_LOG) 2>&1

test-lane-after-gluon: test-lane-mxnet $(MAIN_STAMP)
	@{ echo "== $(MAIN_VENV): strict nbval of the shared notebooks that follow gluon/01 =="; \
	  $(ONE_THREAD) $(MAIN_PY) -m pytest $(NBVAL) $(TEST_AFTER_GLUON); \
	  echo $$? >$(TEST_STATUS)/after-gluon; } >>$(MXNET_LANE_LOG) 2>&1

# The unit tests print their ten slowest; strict nbval prints the seconds of every notebook.
# The MXNet environment's unit tests run beside the main ones, one process each on the two cores
# of the smallest CI machine; their report follows the main one's, and either failing fails the
# target. The notebooks run one at a time: their budgets are wall-clock seconds.
UNIT_MXNET_LOG := build/unit-tests-mxnet.log
test-unit: venvs
	@mkdir -p build; \
	$(ONE_THREAD) MPTUTOR_REQUIRE_FRAMEWORKS=$(MXNET_FRAMEWORKS) $(MXNET_PY) -m pytest \
	    -p no:cacheprovider --durations=10 tests >$(UNIT_MXNET_LOG) 2>&1 & mxnet=$$!; \
	$(ONE_THREAD) MPTUTOR_REQUIRE_FRAMEWORKS=$(MAIN_FRAMEWORKS) $(MAIN_PY) -m pytest \
	    -p no:cacheprovider --durations=10 tests; main_rc=$$?; \
	wait $$mxnet; mxnet_rc=$$?; \
	echo "== unit tests in $(MXNET_VENV), run beside the ones above (exit $$mxnet_rc) =="; \
	cat $(UNIT_MXNET_LOG); \
	test $$main_rc -eq 0 && test $$mxnet_rc -eq 0

test-notebooks: venvs
	$(MAIN_PY) -m pytest $(NBVAL) $(MAIN_NOTEBOOKS)
	$(MXNET_PY) -m pytest $(NBVAL) $(MXNET_SHARED_NOTEBOOKS)
	$(ALL_THREADS) $(MXNET_PY) -m pytest $(NBVAL) $(MXNET_ALONE_NOTEBOOKS)

# gluon/01 (MXNet environment), then RUN_AFTER_GLUON, run beside the other shared notebooks (main
# environment), each lane from the moment its environment is made, as under `make test`; then the
# notebooks that run alone, the Gluon ones last, on every core; every runner appends to one summary
# (build/summary.json, .txt). Both environments run even when one has a failing notebook. Without a
# Python 3.11 for the MXNet environment the PyTorch and Keras tracks still run and the Gluon track
# is reported as not run. The exit status is non-zero if any notebook failed or did not run.
RUNNER = -m mptutor.notebooks --out build --append --budgets $(BUDGETS)
RUN_STATUS := build/run-status
RUN_PARTS := main-shared gluon-01 after-gluon
RUN_GLUON_LOG := build/run-gluon.log
run:
	@rm -rf $(RUN_STATUS) build/summary.json build/summary.txt && mkdir -p $(RUN_STATUS)
	-@$(MAKE) --no-print-directory -j2 -k run-lanes
	@rc=0; echo "== $(MXNET_SHARED_NOTEBOOKS), then the shared notebooks that follow it, run beside the above =="; \
	cat $(RUN_GLUON_LOG); \
	echo "== the notebooks that run alone =="; \
	$(MAIN_PY) $(RUNNER) $(ALONE_NOTEBOOKS) || rc=1; \
	if test -x $(MXNET_PY); then $(ALL_THREADS) $(MXNET_PY) $(RUNNER) $(MXNET_ALONE_NOTEBOOKS) || rc=1; fi; \
	$(MAIN_PY) docs/build_site.py --notebooks build || rc=1; \
	for part in $(RUN_PARTS); do test "$$(cat $(RUN_STATUS)/$$part 2>/dev/null)" = 0 || { rc=1; \
	    echo "make run: $$part failed or did not run" >&2; }; done; \
	exit $$rc

.PHONY: run-lanes run-lane-main run-lane-gluon run-lane-after-gluon
run-lanes: run-lane-main run-lane-after-gluon

run-lane-main: $(MAIN_STAMP)
	@$(ONE_THREAD) $(MAIN_PY) $(RUNNER) $(filter-out $(RUN_AFTER_GLUON),$(SHARED_NOTEBOOKS)); \
	echo $$? >$(RUN_STATUS)/main-shared

# The MXNet environment only where a Python 3.11 exists for it (see MXNET_PYTHON).
run-lane-gluon: $(if $(wildcard $(MXNET_PY))$(MXNET_PYTHON),$(MXNET_STAMP))
	@{ if test -x $(MXNET_PY); then $(ONE_THREAD) $(MXNET_PY) $(RUNNER) $(MXNET_SHARED_NOTEBOOKS); \
	  else echo "make run: $(MXNET_NOTEBOOKS) did not run: $(NO_MXNET_PYTHON)" >&2; false; fi; \
	  echo $$? >$(RUN_STATUS)/gluon-01; } >$(RUN_GLUON_LOG) 2>&1

run-lane-after-gluon: run-lane-gluon $(MAIN_STAMP)
	@$(ONE_THREAD) $(MAIN_PY) $(RUNNER) $(RUN_AFTER_GLUON) >>$(RUN_GLUON_LOG) 2>&1; \
	echo $$? >$(RUN_STATUS)/after-gluon

site: $(MAIN_STAMP)
	$(MAIN_PY) docs/build_site.py

# gluon/01 computes on the one thread its setup cell asks for (an OMP_NUM_THREADS set before it
# starts would win), gluon/02 on every core, as under `make test` and `make run`.
notebooks: venvs
	@rc=0; \
	$(MAIN_PY) -m mptutor.notebooks $(MAIN_NOTEBOOKS) --in-place || rc=1; \
	$(MXNET_PY) -m mptutor.notebooks $(MXNET_SHARED_NOTEBOOKS) --in-place || rc=1; \
	$(ALL_THREADS) $(MXNET_PY) -m mptutor.notebooks $(MXNET_ALONE_NOTEBOOKS) --in-place || rc=1; \
	exit $$rc

# A GPU host lent for a window: PYTHON is its interpreter with CUDA PyTorch. The window's two
# commands (README, "GPU plan"): `first`, every headline figure within 7 minutes (the install
# from wheelhouse/ included), then `next`, the notebooks the ledger says are due, as many as fit
# in 7 minutes; on a host lent for 15 minutes, run `next` only with 5 minutes or more left
# (GPU_PLAN_NEXT_S=<seconds left less a minute>), then give the host back. Both run even if
# `first` fails; commit the records and $(GPU_OUT)/next/gpu-ledger.json afterwards.
test-gpu:
	@rc=0; \
	$(GPU_PLAN) first $(GPU_OUT)/first || rc=1; \
	$(GPU_PLAN) next $(GPU_OUT)/next || rc=1; \
	exit $$rc

# Wheels for the GPU host (Linux x86-64, Python 3.12); needs only pip, not the environments.
wheelhouse:
	WHEELHOUSE_PIP=$(PYTHON) bash benchmarks/gpu-plan.sh wheelhouse

lab: $(MAIN_STAMP)
	$(MAIN_PY) -m jupyter lab notebooks

lint: $(MAIN_STAMP)
	$(MAIN_PY) -m ruff check mptutor tests benchmarks notebooks

clean:
	rm -rf build .pytest_cache .ruff_cache .hypothesis
