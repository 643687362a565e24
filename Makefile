# The whole set-up is here: `make course` opens the course, `make test` runs every test.
# The first Python 3.10+ on PATH, 3.11 first (the version the course is tested with); or
# `make course PYTHON=/path/to/python3.11`.
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3.10 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
	2>/dev/null && { command -v $$p; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
# A range that admits a newer torch pulls a multi-GB CUDA build on some machines: pin it first.
TORCH_SPEC ?= torch==2.13.0
# Which build of torch: pip's default index gives Linux the CUDA build (several GB). On a
# machine without an NVIDIA GPU, TORCH_INDEX=<PyTorch's CPU wheel index> gets the CPU build
# (README, "torch: the CPU build"); it is passed to pip as an extra index.
TORCH_INDEX ?=
ifneq ($(strip $(TORCH_INDEX)),)
TORCH_SOURCE := --extra-index-url $(TORCH_INDEX)
endif
INSTALLED := $(VENV)/.minillm-installed
# Two test workers (one per core on the 2-core CI machine), each notebook kept whole in one worker,
# each worker's torch on one thread so the two do not fight over the cores.
# The 30 slowest tests are listed at the end, so a CI log shows where the time goes.
PYTEST_ARGS ?= -n 2 --dist loadscope --durations=30
LEVEL_PYTEST_ARGS ?= -n 2 --dist loadscope -q
BUNDLE ?= dist/minillm-bundle
MODEL_FILE := SmolLM2-135M-Instruct.Q4_1.gguf
# `make course OFFLINE=path/to/bundle` installs from a bundle made by `make bundle`, with no network.
ifdef OFFLINE
PIP_SOURCE := --no-index --find-links $(abspath $(OFFLINE))/wheels
FETCH_SOURCE := --from $(abspath $(OFFLINE))/model/$(MODEL_FILE)
endif

# The browser tests drive the machine's own Chromium or Chrome (never one downloaded by
# playwright; CHROMIUM=path chooses it) and are skipped where there is none. `make browser`
# installs Debian's Chromium and a CJK font (so the lessons' Chinese terms show, not boxes):
# the only target that installs system packages, run only when asked (CI asks).
CJK_FONT := /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
JUPYTER_ARGS ?=
# JupyterLab refuses to run as root (as in containers and CI) unless told it may.
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

# `make course LANG=zh` opens the Chinese edition (notebooks/zh/). LANG is also the locale's
# variable: given on the command line it only chooses the edition, and is not passed on.
EDITION :=
ifeq ($(origin LANG),command line)
ifeq ($(LANG),zh)
EDITION := zh/
else ifneq ($(LANG),en)
$(error LANG=$(LANG): the course comes in English (the default, or LANG=en) and Chinese (LANG=zh))
endif
unexport LANG
endif

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: course test setup model doctor bundle browser clean-venv book assignments

$(PY):
	@if [ -z "$(PYTHON)" ]; then echo "minillm needs Python 3.10 or newer (3.11 preferred) and \
	found none on PATH: install one (python.org, Homebrew, apt, dnf), or name it with \
	make PYTHON=/path/to/python3.11"; exit 1; fi
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "$(PYTHON) is \
	Python $$($(PYTHON) -c 'import platform; print(platform.python_version())' 2>/dev/null \
	|| echo '(it does not run)'); minillm needs 3.10 or newer (3.11 preferred): \
	make PYTHON=/path/to/python3.11"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "$(PYTHON) could not make a virtual \
	environment: on Ubuntu or Debian install its venv package (sudo apt install python3-venv, \
	or python3.11-venv), then run make again"; exit 1; }

$(INSTALLED): pyproject.toml | $(PY)
	@# before the rename to minillm-course the distribution was called minillm: one copy only
	@$(PY) -m pip uninstall --quiet --yes minillm 2>/dev/null || true
	$(PY) -m pip install --quiet $(PIP_SOURCE) $(TORCH_SOURCE) "$(TORCH_SPEC)" -e ".[dev]"
	touch $@

# lm-evaluation-harness, for its test against the server: `make test` installs it, `make course`
# does not.
EVAL_INSTALLED := $(VENV)/.minillm-eval-installed
$(EVAL_INSTALLED): pyproject.toml | $(INSTALLED)
	$(PY) -m pip install --quiet $(PIP_SOURCE) -e ".[eval]"
	touch $@

# nbgrader, for the instructors' course of graded exercises: `make assignments` and `make test`
# install it, `make course` does not.
GRADING_INSTALLED := $(VENV)/.minillm-grading-installed
$(GRADING_INSTALLED): pyproject.toml | $(INSTALLED)
	$(PY) -m pip install --quiet $(PIP_SOURCE) -e ".[grading]"
	touch $@

model: $(INSTALLED)
	$(PY) -m minillm fetch $(FETCH_SOURCE)

setup: $(INSTALLED) model

course: setup
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks/$(EDITION)00_welcome.ipynb $(ALLOW_ROOT) \
		$(JUPYTER_ARGS)

browser:
	@if command -v chromium >/dev/null && [ -f $(CJK_FONT) ]; then \
		echo "chromium and the CJK font are installed"; else \
		echo "Installing chromium, chromium-driver and fonts-noto-cjk from Debian"; \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
			fonts-noto-cjk; fi

# Then the kernels' tests again at each lower instruction-set level the machine runs
# (MINILLM_KERNEL_LEVEL; scripts/test_levels.py).
test: setup $(EVAL_INSTALLED) $(GRADING_INSTALLED)
	OMP_NUM_THREADS=1 $(PY) -m pytest --nbval-lax tests notebooks solutions --ignore=notebooks/zh --ignore=solutions/zh $(PYTEST_ARGS)
	OMP_NUM_THREADS=1 $(PY) scripts/test_levels.py $(LEVEL_PYTEST_ARGS)

# The exercises as two nbgrader courses, grading/en and grading/zh (docs/instructor.md).
assignments: setup $(GRADING_INSTALLED)
	$(PY) scripts/assignments.py

doctor: setup
	$(PY) -m minillm doctor

bundle: setup book
	$(PY) scripts/make_bundle.py --out $(BUNDLE) --torch "$(TORCH_SPEC)" --book build/book/html \
		$(if $(strip $(TORCH_INDEX)),--torch-index "$(TORCH_INDEX)")

clean-venv:
	rm -rf $(VENV)

# --- The book (docs/book.md): every lesson executed at full size, once per version of its source
# (the executed copies are kept in executed/), and a static HTML book in build/book/html that opens
# offline. BOOK_ARGS=--force executes every lesson again.
BOOK_ARGS ?=
book: setup
	$(PY) -m book $(BOOK_ARGS)
