# mptutor: `make run` executes every notebook into build/, `make test` runs the unit tests and
# strict nbval. Both create .venv on first use and reuse it afterwards.
#
#   make test                                   unit tests, then strict nbval over notebooks/
#   make run                                    execute every notebook into build/ (+ HTML, summary)
#   make test REQUIREMENTS=requirements-gpu.txt the same on a GPU host with the CUDA builds
#   make test-gpu                               only the tests marked `gpu`; fails without a GPU
#   make notebooks                              re-execute the committed notebooks in place
#   make lab                                    JupyterLab in the project environment

PYTHON ?= python3
REQUIREMENTS ?= requirements.txt
# One environment per requirements file, so CPU and CUDA builds never mix.
VENV ?= $(if $(filter requirements.txt,$(REQUIREMENTS)),.venv,.venv-$(basename $(notdir $(REQUIREMENTS))))
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(notdir $(REQUIREMENTS))
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval-sanitize.cfg \
         --nbval-cell-timeout=900
# Quiet the frameworks' C++ start-up logs in every process that make starts.
export TF_CPP_MIN_LOG_LEVEL ?= 3

.PHONY: venv test test-unit test-notebooks test-gpu run notebooks lab lint clean

venv: $(STAMP)

$(STAMP): $(REQUIREMENTS) requirements-common.txt pyproject.toml
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; print(f"Python {v[0]}.{v[1]} found; the pinned set is made for 3.11") if v != (3, 11) else None'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r $(REQUIREMENTS)
	$(PY) -m pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-*
	@touch $@

test: test-unit test-notebooks

test-unit: $(STAMP)
	$(PY) -m pytest tests

test-notebooks: $(STAMP)
	$(PY) -m pytest $(NBVAL) notebooks

test-gpu: $(STAMP)
	MPTUTOR_REQUIRE_GPU=1 $(PY) -m pytest -m gpu tests

run: $(STAMP)
	$(PY) -m mptutor.notebooks notebooks --out build

notebooks: $(STAMP)
	$(PY) -m mptutor.notebooks notebooks --in-place

lab: $(STAMP)
	$(PY) -m jupyter lab notebooks

lint: $(STAMP)
	$(PY) -m ruff check mptutor tests benchmarks notebooks

clean:
	rm -rf build .pytest_cache .ruff_cache .hypothesis
