# The whole set-up is here: `make course` opens the course, `make test` runs every test.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# A range that admits a newer torch pulls a multi-GB CUDA build on some machines: pin it first.
TORCH_SPEC ?= torch==2.13.0
INSTALLED := $(VENV)/.minillm-installed
# Two test workers (one per core on the 2-core CI machine), each notebook kept whole in one worker,
# each worker's torch on one thread so the two do not fight over the cores.
PYTEST_ARGS ?= -n 2 --dist loadscope
BUNDLE ?= dist/minillm-bundle
MODEL_FILE := SmolLM2-135M-Instruct.Q4_1.gguf
# `make course OFFLINE=path/to/bundle` installs from a bundle made by `make bundle`, with no network.
ifdef OFFLINE
PIP_SOURCE := --no-index --find-links $(abspath $(OFFLINE))/wheels
FETCH_SOURCE := --from $(abspath $(OFFLINE))/model/$(MODEL_FILE)
endif

# The browser tests drive Debian's Chromium (never a browser downloaded by playwright).
CHROMIUM := /usr/bin/chromium
# A CJK font, so the lessons' Chinese terms show in the browser (and its screenshots), not boxes.
CJK_FONT := /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
JUPYTER_ARGS ?=
# JupyterLab refuses to run as root (as in containers and CI) unless told it may.
ALLOW_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: course test setup model doctor bundle browser clean-venv book

$(PY):
	$(PYTHON) -m venv $(VENV)

$(INSTALLED): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet $(PIP_SOURCE) "$(TORCH_SPEC)" -e ".[dev]"
	touch $@

model: $(INSTALLED)
	$(PY) -m minillm fetch $(FETCH_SOURCE)

setup: $(INSTALLED) model

course: setup
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks/00_welcome.ipynb $(ALLOW_ROOT) $(JUPYTER_ARGS)

# One install for both files (a grouped target): runs when either is missing, never twice.
$(CHROMIUM) $(CJK_FONT) &:
	@echo "Installing chromium, chromium-driver and fonts-noto-cjk from Debian for the browser tests"
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
		fonts-noto-cjk

browser: $(CHROMIUM) $(CJK_FONT)

test: setup browser
	OMP_NUM_THREADS=1 $(PY) -m pytest --nbval-lax tests notebooks solutions $(PYTEST_ARGS)

doctor: setup
	$(PY) -m minillm doctor

bundle: setup book
	$(PY) scripts/make_bundle.py --out $(BUNDLE) --torch "$(TORCH_SPEC)" --book build/book/html

clean-venv:
	rm -rf $(VENV)

# --- The book (docs/book.md): every lesson executed at full size, once per version of its source
# (the executed copies are kept in executed/), and a static HTML book in build/book/html that opens
# offline. BOOK_ARGS=--force executes every lesson again.
BOOK_ARGS ?=
book: setup
	$(PY) -m book $(BOOK_ARGS)
