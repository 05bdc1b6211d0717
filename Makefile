# mptutor: every notebook runs in the environment of its framework.
#
#   .venv        the main environment (requirements.txt): PyTorch and TensorFlow/Keras,
#                notebooks/pytorch and notebooks/keras
#   .venv-mxnet  the MXNet environment (requirements-mxnet.txt): MXNet 1.9.1 with NumPy 1.23.5,
#                notebooks/gluon
#
#   make test        create both environments on first use, run the unit tests in each, then
#                    strict nbval over every notebook in its framework's environment
#   make run         execute every notebook into build/<track>/ (.ipynb + .html) with a summary
#   make notebooks   re-execute the committed notebooks in place
#   make test-gpu PYTHON=/path/to/python
#                    on a GPU host that brings its own CUDA PyTorch: the `gpu` tests and strict
#                    nbval over the PyTorch notebooks on the GPU path (see README, "GPU hosts")
#   make wheelhouse  download what `make test-gpu` installs, for an offline host
#                    (WHEELHOUSE_PYTHON=3.12 by default)
#   make lab         JupyterLab in the main environment
#   make lint        ruff over the package, tests, benchmarks and notebooks

PYTHON ?= python3
# NumPy 1.23.5 has wheels up to Python 3.11 only: give a 3.11 (or 3.10) interpreter here if
# PYTHON is newer.
MXNET_PYTHON ?= $(PYTHON)

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
GPU_NOTEBOOKS := notebooks/pytorch

NBVAL := -p no:cacheprovider --nbval --nbval-current-env \
         --nbval-sanitize-with tests/nbval-sanitize.cfg --nbval-cell-timeout=900
# Quiet the frameworks' C++ start-up logs in every process that make starts.
export TF_CPP_MIN_LOG_LEVEL ?= 3

# GPU hosts: an environment on top of the host's own Python and CUDA PyTorch.
GPU_VENV := .venv-gpu-host
GPU_PY := $(GPU_VENV)/bin/python
WHEELHOUSE ?= wheelhouse
WHEELHOUSE_PYTHON ?= 3.12
WHEELHOUSE_PLATFORMS := manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_28_x86_64
# Set to 0 only to rehearse `make test-gpu` on a machine without a GPU.
MPTUTOR_REQUIRE_GPU ?= 1

.PHONY: venvs test test-unit test-notebooks run notebooks test-gpu wheelhouse lab lint clean

venvs: $(MAIN_STAMP) $(MXNET_STAMP)

$(MAIN_STAMP): requirements.txt pyproject.toml
	@test -x $(MAIN_PY) || $(PYTHON) -m venv $(MAIN_VENV)
	$(MAIN_PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(MAIN_PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

$(MXNET_STAMP): requirements-mxnet.txt pyproject.toml
	@$(MXNET_PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] <= (3, 11) else "MXNET_PYTHON must be Python 3.11 or older: NumPy 1.23.5, which mxnet 1.9.1 needs, has no wheels for newer ones")'
	@test -x $(MXNET_PY) || $(MXNET_PYTHON) -m venv $(MXNET_VENV)
	$(MXNET_PY) -m pip install --quiet --disable-pip-version-check -r requirements-mxnet.txt
	$(MXNET_PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@touch $@

test: test-unit test-notebooks

test-unit: venvs
	MPTUTOR_REQUIRE_FRAMEWORKS=$(MAIN_FRAMEWORKS) $(MAIN_PY) -m pytest -p no:cacheprovider tests
	MPTUTOR_REQUIRE_FRAMEWORKS=$(MXNET_FRAMEWORKS) $(MXNET_PY) -m pytest -p no:cacheprovider tests

test-notebooks: venvs
	$(MAIN_PY) -m pytest $(NBVAL) $(MAIN_NOTEBOOKS)
	$(MXNET_PY) -m pytest $(NBVAL) $(MXNET_NOTEBOOKS)

# Both environments run even when the first one has a failing notebook; the exit status is
# non-zero if any notebook failed.
run: venvs
	@rc=0; \
	$(MAIN_PY) -m mptutor.notebooks $(MAIN_NOTEBOOKS) --out build || rc=1; \
	$(MXNET_PY) -m mptutor.notebooks $(MXNET_NOTEBOOKS) --out build --append || rc=1; \
	exit $$rc

notebooks: venvs
	@rc=0; \
	$(MAIN_PY) -m mptutor.notebooks $(MAIN_NOTEBOOKS) --in-place || rc=1; \
	$(MXNET_PY) -m mptutor.notebooks $(MXNET_NOTEBOOKS) --in-place || rc=1; \
	exit $$rc

# A GPU host: PYTHON is its interpreter with CUDA PyTorch. The environment sees the host's
# packages (its pip included) and adds only what is missing (notebook tools, Keras, this package), from
# $(WHEELHOUSE)/ when that folder exists (offline) and from the index otherwise. The `gpu` tests
# and nbval both run even if the first fails.
test-gpu:
	@$(PYTHON) -c 'import torch' 2>/dev/null || { echo "make test-gpu needs PYTHON=<an interpreter with CUDA PyTorch>" >&2; exit 2; }
	@test -x $(GPU_PY) || $(PYTHON) -m venv --system-site-packages --without-pip $(GPU_VENV)
	@# PYTHON may itself be a virtual environment: its site-packages come in through a .pth file.
	@$(PYTHON) -c 'import site; print("\n".join(site.getsitepackages()))' \
	    > "$$($(GPU_PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-site-packages.pth"
	$(GPU_PY) -m pip install --quiet --disable-pip-version-check \
	    $(if $(wildcard $(WHEELHOUSE)/*.whl),--no-index --find-links $(WHEELHOUSE)) \
	    -r requirements-gpu-host.txt
	$(GPU_PY) -m pip install --quiet --disable-pip-version-check --no-deps \
	    $(if $(wildcard $(WHEELHOUSE)/*.whl),--no-index --find-links $(WHEELHOUSE)) -e .
	@rc=0; \
	MPTUTOR_REQUIRE_GPU=$(MPTUTOR_REQUIRE_GPU) MPTUTOR_REQUIRE_FRAMEWORKS=torch \
	    $(GPU_PY) -m pytest -p no:cacheprovider -m gpu tests || rc=1; \
	$(GPU_PY) -m pytest $(NBVAL) $(GPU_NOTEBOOKS) || rc=1; \
	exit $$rc

# Wheels for `make test-gpu` on an offline host (Linux x86-64, Python $(WHEELHOUSE_PYTHON)).
# The host brings NumPy with its PyTorch, so the NumPy wheel that the resolver pulls in is
# dropped again.
wheelhouse: $(MAIN_STAMP)
	rm -rf $(WHEELHOUSE)
	$(MAIN_PY) -m pip download --quiet --disable-pip-version-check --only-binary :all: \
	    --python-version $(WHEELHOUSE_PYTHON) $(addprefix --platform ,$(WHEELHOUSE_PLATFORMS)) \
	    -r requirements-gpu-host.txt setuptools wheel \
	    -c requirements.txt -d $(WHEELHOUSE)
	rm -f $(WHEELHOUSE)/numpy-*.whl
	@du -sh $(WHEELHOUSE); ls $(WHEELHOUSE) | wc -l | xargs echo wheels:

lab: $(MAIN_STAMP)
	$(MAIN_PY) -m jupyter lab notebooks

lint: $(MAIN_STAMP)
	$(MAIN_PY) -m ruff check mptutor tests benchmarks notebooks

clean:
	rm -rf build .pytest_cache .ruff_cache .hypothesis
