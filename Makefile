# The course's commands. `make lab` to learn, `make test` to check everything.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum < requirements.txt | cut -d' ' -f1)
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
# JupyterLab refuses to run as root without this flag (containers, CI)
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
PYTEST_NB := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 120

.PHONY: install lab test test-unit test-notebooks test-browser browser execute lint clean gpu-benchmark

install: $(STAMP)

# PYTHON builds .venv (3.11.5 to 3.13). TORCH_INDEX_URL picks the PyTorch build: empty = pip's
# choice (Linux from PyPI: the CUDA build; this course's CI: the local CPU wheel). See README.
PYTHON ?= python3
TORCH_INDEX_URL ?=
TORCH_PIN := $(shell grep -m1 '^torch==' requirements.txt)

$(STAMP): requirements.txt
	@$(PYTHON) course_utils/bootstrap.py python
	@# a .venv left half-made by an interrupted install, or made by an unsuitable Python, is rebuilt
	@$(PYTHON) course_utils/bootstrap.py venv $(VENV) || { echo "Rebuilding $(VENV) from scratch."; rm -rf $(VENV); }
	rm -f $(VENV)/.installed-*
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# PyTorch WITH its dependencies (a CUDA build needs its CUDA libraries), held to the pins
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH_PIN)" -c requirements.txt \
	  $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
	@# everything else exactly as pinned, nothing pulled in beyond the list
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements.txt
	# make `import course_utils` work from any folder, notebooks included
	$(PY) -c "import pathlib, site; pathlib.Path(site.getsitepackages()[0], 'attention_course.pth').write_text(str(pathlib.Path.cwd()) + '\n')"
	touch $@

lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks --ServerApp.ip=localhost $(ALLOW_ROOT)

# unit tests, exercise tests, hygiene, browser test and every notebook under strict nbval, 2 workers
# (one thread per worker: two workers with two threads each on two cores run up to 10x slower)
test test-unit test-notebooks execute: export OMP_NUM_THREADS = 1
test: install
	$(PY) -m pytest -n 2 --dist loadscope $(PYTEST_NB) tests notebooks

test-unit: install
	$(PY) -m pytest -n 2 --dist loadscope tests

test-notebooks: install
	$(PY) -m pytest -n 2 --dist loadscope $(PYTEST_NB) notebooks

# JupyterLab in headless Chromium runs lesson 04 (also part of `test`)
test-browser: install
	$(PY) -m pytest tests/test_browser.py

# Debian's chromium for the real-browser test (needs root and apt; CI runs this first)
browser:
	command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Re-execute every notebook in place, in order, each in a fresh kernel (how `test` checks them)
execute: install
	for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; \
	  $(VENV)/bin/papermill --no-progress-bar --cwd notebooks -k python3 "$$nb" "$$nb" || exit 1; \
	done
	$(PY) tests/notebook_tools.py strip-metadata $(NOTEBOOKS)

# Lesson 07 on a GPU: papermill re-runs it with long sequences in bfloat16 (batch 4, 16 heads,
# head_dim 64, n up to 8192) and writes the executed notebook and a CSV of the table to artifacts/.
# GPU_PEAK_TFLOPS: the GPU's dense bf16 peak from its data sheet (989 = H100/H200 SXM), for "% of peak".
GPU_PEAK_TFLOPS ?= 989
gpu-benchmark: install
	mkdir -p artifacts
	COURSE_DEVICE=cuda $(VENV)/bin/papermill --no-progress-bar --cwd notebooks -k python3 \
	  notebooks/07_efficient_attention.ipynb artifacts/07_efficient_attention_gpu.ipynb \
	  -y "{DTYPE: bfloat16, SEQ_LENS: [512, 1024, 2048, 4096, 8192], BATCH: 4, HEADS: 16, HEAD_DIM: 64, \
	      REPEATS: 10, KV_STEPS: 500, GPU_PEAK_TFLOPS: $(GPU_PEAK_TFLOPS), RESULTS_CSV: ../artifacts/07_benchmark_gpu.csv}"

lint: install
	$(VENV)/bin/ruff check course_utils tests notebooks
	$(VENV)/bin/ruff format --check course_utils tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build/ artifacts/
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
