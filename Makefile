# The course's commands. `make lab` to learn, `make test` to check everything.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum < requirements.txt | cut -d' ' -f1)
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]*_*.ipynb))
# JupyterLab refuses to run as root without this flag (containers, CI)
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
PYTEST_NB := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 120

.PHONY: progress grade doctor install lab test test-unit test-notebooks test-scroll-back test-lesson test-seeds test-perturbed test-hosted test-browser browser execute lint lock hooks nbdime train-lm clean test-gpu gpu-benchmark gpu-wheels

install: $(STAMP)

# PYTHON builds .venv (3.11.5 to 3.13). TORCH_INDEX_URL picks the PyTorch build: empty = pip's
# choice (Linux from PyPI: the CUDA build; this course's CI: the local CPU wheel). See README.
PYTHON ?= python3
TORCH_INDEX_URL ?=
TORCH_PIN := $(shell grep -m1 '^torch==' requirements.txt)

$(STAMP): requirements.txt
	@$(PYTHON) course_utils/tools/bootstrap.py python
	@# a .venv left half-made by an interrupted install, or made by an unsuitable Python, is rebuilt
	@$(PYTHON) course_utils/tools/bootstrap.py venv $(VENV) || { echo "Rebuilding $(VENV) from scratch."; rm -rf $(VENV); }
	rm -f $(VENV)/.installed-*
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# PyTorch WITH its dependencies (a CUDA build needs its CUDA libraries), held to the pins
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH_PIN)" -c requirements.txt \
	  $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	@# everything else exactly as pinned, nothing pulled in beyond the list; not the CUDA libraries, which the
	@# step above installed (held to their pins) if the chosen PyTorch build needs them: a CPU build needs none
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r <(grep -vE '^(nvidia|cuda)-' requirements.txt)
	@# left out of the lock on purpose (scripts/lock_requirements.py, LEFT_OUT): gone from an older .venv too
	$(PY) -m pip uninstall --quiet --disable-pip-version-check -y rfc3987-syntax 2>/dev/null || true
	# make `import course_utils` work from any folder, notebooks included
	$(PY) -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()['purelib'], 'attention_course.pth').write_text(str(pathlib.Path.cwd()) + '\n')"
	# the course's JupyterLab defaults (jupyter/overrides.json): no news prompt, nothing fetched online
	mkdir -p $(VENV)/share/jupyter/lab/settings && cp jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/
	touch $@

# one thread, as the notebooks were executed (make execute), so a learner's kernel sums in the same order
lab: export OMP_NUM_THREADS = 1
lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks --ServerApp.ip=localhost $(ALLOW_ROOT)

# unit tests, exercise tests, hygiene, browser test and every notebook under strict nbval, 2 workers
# (the scroll-back re-runs are `make test-scroll-back`, which CI runs next, and part of `make test-lesson`)
# (one thread per worker: two workers with two threads each on two cores run up to 10x slower;
# the slowest modules, then the notebooks, then the short unit tests: conftest.py's SLOWEST_FIRST)
test test-unit test-notebooks test-scroll-back test-lesson test-seeds execute: export OMP_NUM_THREADS = 1
test: install lint
	$(PY) -m pytest -n 2 --dist loadscope $(PYTEST_NB) notebooks tests

# One lesson's notebook (strict nbval and its scroll-back re-runs), its hygiene checks, its exercise tests and the
# unit tests of the modules it imports: the inner loop of whoever edits it. LESSON=05c (its number)
test-lesson: install
	@test -n "$(LESSON)" || { echo "say which lesson: make test-lesson LESSON=05c"; exit 2; }
	$(PY) -m pytest -n 2 --dist loadscope $(PYTEST_NB) --scroll-back --lesson $(LESSON) notebooks tests

test-unit: install
	$(PY) -m pytest -n 2 --dist loadscope tests

test-notebooks: install
	$(PY) -m pytest -n 2 --dist loadscope $(PYTEST_NB) notebooks

# Every lesson under strict nbval, then, in the same kernel, every code cell re-run alone with the exercises
# solved, as a learner who scrolls back after Run All (tests/scroll_back.py): it must print what it printed,
# and each check must pass. Not in `test` (the re-runs add 118-139 s of test time); CI runs it after `make test`.
test-scroll-back: install
	$(PY) -m pytest -n 2 --dist loadscope $(PYTEST_NB) --scroll-back notebooks

# Lessons run by papermill with other values of their parameters cell: every lesson once, lesson 11 with
# each stored seed (its asserts claim what holds on every seed) (tests/notebooks/test_lesson_seeds.py;
# not in `test`: 20 runs, 149 s on 2 cores of an AVX-512 EPYC)
test-seeds: install
	$(PY) -m pytest -n 2 -m seeds tests/notebooks/test_lesson_seeds.py

# Every notebook under nbval once per perturbation of floating-point order this CPU can produce (PyTorch's
# kernels, MKL's and oneDNN's code paths, two threads): each must pass with the cells' NBVAL_TOLERANCE, and
# the table of how far each cell moved is printed (scripts/perturbed_runs.py; 8 runs of 3-6 min measured;
# CI runs it after make test). SPREAD=1 also stores the spreads in tests/nbval_spread.json (CONTRIBUTING.md).
test-perturbed: install
	$(PY) scripts/perturbed_runs.py $(if $(SPREAD),--write-spread)

# A lesson as on a hosted Jupyter: a fresh virtual environment with another PyTorch (HOSTED_TORCH, default
# torch==2.13.0) and only Jupyter's kernel; the lesson's first cell installs the course from its folder, then
# from its wheel, and must keep that PyTorch (tests/tools/test_hosted.py; not in `test`: it installs the
# course's dependencies twice; CI runs it after make test)
test-hosted: install
	$(PY) -m pytest -m hosted tests/tools/test_hosted.py

# JupyterLab in headless Chromium runs lesson 04 (also part of `test`)
test-browser: install
	$(PY) -m pytest tests/notebooks/test_browser.py

# Debian's chromium for the real-browser test (needs root and apt; CI runs this first)
browser:
	command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Learners: my exercises, from the saved notebooks (nothing is run; save the notebook first)
progress:
	@$(if $(wildcard $(PY)),$(PY),python3) -m course_utils.tools.progress "$(NOTEBOOKS_DIR)"

# What is wrong with this machine for the course, and the fix for each (paste it into bug reports);
# runs with .venv's Python when there is one, so it also works when the install is broken
doctor:
	@$(if $(wildcard $(PY)),$(PY),python3) -m course_utils.tools.doctor

# Instructors and CI: run copies of the notebooks in NOTEBOOKS_DIR (or of each learner's folder in it),
# check every exercise, write artifacts/grade/ (grade.md, grade.json, gradebook.csv); exit 1 unless all
# passed (ALLOW_NOT_ATTEMPTED=1 lets stubs pass). GRADE_TIME_LIMIT: seconds for one notebook's cells
NOTEBOOKS_DIR ?= notebooks
GRADE_TIME_LIMIT ?= 300
grade: install
	$(PY) -m course_utils.tools.grade "$(NOTEBOOKS_DIR)" --time-limit $(GRADE_TIME_LIMIT) $(if $(ALLOW_NOT_ATTEMPTED),--allow-not-attempted)

# Re-execute every notebook in place, in order, each in a fresh kernel (how `test` checks them)
execute: install
	for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; \
	  $(VENV)/bin/papermill --no-progress-bar --cwd notebooks -k python3 "$$nb" "$$nb" || exit 1; \
	done
	$(PY) scripts/clean_notebooks.py $(NOTEBOOKS)

# The whole suite on a CUDA GPU: strict nbval with COURSE_DEVICE=cuda against the committed outputs,
# the unit tests, then the GPU benchmarks; one summary. Results in artifacts/gpu/ (see scripts/gpu_suite.py).
# Needs a CUDA build of PyTorch in .venv (README: TORCH_INDEX_URL); stops with the reason without a GPU.
test-gpu: install
	$(PY) scripts/gpu_suite.py

# Only the benchmarks: lessons 07 and 09 re-run by papermill in bfloat16, batch 4, 16 heads, head_dim 64,
# n up to 8192. GPU_PEAK_TFLOPS: the GPU's dense bf16 peak from its data sheet (989 = H100/H200 SXM).
GPU_PEAK_TFLOPS ?= 989
gpu-benchmark: install
	$(PY) scripts/gpu_suite.py --benchmarks --peak-tflops $(GPU_PEAK_TFLOPS)

# Wheels for a GPU machine that cannot download and keeps its own PyTorch (scripts/gpu_machine.sh):
# everything pinned except PyTorch and what it brings, and what the GPU run never uses.
GPU_PYTHON_VERSION ?= 3.12
GPU_MACHINE_HAS := torch|triton|nvidia-.*|cuda-.*|filelock|fsspec|jinja2|markupsafe|mpmath|networkx|sympy|typing.extensions|setuptools
GPU_RUN_SKIPS := playwright|jupyterlab|ruff
gpu-wheels:
	grep -v '^#' requirements.txt | grep -viE '^($(GPU_MACHINE_HAS)|$(GPU_RUN_SKIPS))==' > .whl-requirements.txt
	python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version $(GPU_PYTHON_VERSION) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl -r .whl-requirements.txt
	rm .whl-requirements.txt

lint: install
	$(VENV)/bin/ruff check course_utils tests scripts notebooks templates
	$(VENV)/bin/ruff format --check course_utils tests scripts

# Maintainers: re-lock requirements.txt from the direct dependencies in requirements.in, in a
# throw-away venv (review the diff, then `make test`; CONTRIBUTING.md)
lock: install
	$(PY) scripts/lock_requirements.py $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL))

# Retrain lesson 10's language model (three seeds side by side, about 3 min of CPU each); writes
# course_utils/data/language_model_*. The other lessons' longer runs: scripts/*.py, each writing its file there.
train-lm: install
	OMP_NUM_THREADS=1 $(PY) scripts/train_language_model.py

# Maintainers: the commit-msg hook (subject <= 72 characters) for this clone
hooks:
	git config core.hooksPath .githooks

# Maintainers: notebook diffs and merges cell by cell (nbdime's git drivers, this repository only)
NBDIME_PIN := nbdime==4.0.4
nbdime: install
	$(PY) -m pip install --quiet --disable-pip-version-check "$(NBDIME_PIN)" -c requirements.txt
	$(VENV)/bin/nbdime config-git --enable

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build/ artifacts/ .whl/
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
