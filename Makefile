# Shapes: two commands for people (`make lab`, `make test`), a few more for instructors.
# Everything runs inside .venv, created on first use. GPU users: make lab TORCH_SPEC="torch==2.11.0"
# (or any torch >= 2.6 built for their CUDA) -- torch is installed first so pip keeps it.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,hf,classroom
CHP := classroom/node_modules/.bin/configurable-http-proxy
CLASSROOM_ARGS ?=
NBVAL_TIMEOUT ?= 180
SUBMISSIONS ?= submitted
GRADING_OUT ?= grading

.PHONY: setup lab test lint unit notebooks release release-check grade bench bench-gpu help \
	classroom classroom-stop classroom-clean

help:
	@echo "make lab      set up .venv (first time) and open the course in JupyterLab"
	@echo "make test     set up .venv and run every check: lint, unit tests, grading, notebooks"
	@echo "make release  regenerate notebooks/ (student versions) from solutions/"
	@echo "make grade    autograde SUBMISSIONS=folder into GRADING_OUT=folder"
	@echo "make bench    print the benchmark figures quoted in the README"
	@echo "make bench-gpu  the GPU checks (CUDA allocator peaks), for a machine with a GPU"
	@echo "make classroom  JupyterHub + nbgrader exchange + PostgreSQL gradebook here (root; Ctrl-C stops it)"
	@echo "make classroom-stop  stop it from another terminal"

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	@# An editable install skips pyproject's data-files: enable formgrader's CSP extension here.
	install -D -m 644 jupyter-config/jupyter_server_config.d/course_grading.json \
	  $(VENV)/etc/jupyter/jupyter_server_config.d/course_grading.json
	@# rfc3987-syntax builds parsers at import and costs every Jupyter tool ~3 s (TOOLCHAIN.md).
	-$(PY) -m pip uninstall --quiet --yes rfc3987-syntax
	@touch $@

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

# ruff reads the notebooks itself (solutions/ and notebooks/: checked, not reformatted: their
# cells keep the course's compact style); mypy checks course_lib with pyproject's [tool.mypy].
lint: setup
	$(VENV)/bin/ruff check course_lib course_grading tests benchmarks scripts classroom nbgrader_config.py \
	  solutions notebooks
	$(VENV)/bin/ruff format --check course_lib course_grading tests benchmarks scripts classroom nbgrader_config.py
	$(VENV)/bin/mypy course_lib
	$(PY) scripts/release.py --strip-solutions --check

unit: setup
	$(PY) -m pytest tests -q

notebooks: setup
	CI=1 $(PY) -m pytest -q -p no:cacheprovider --nbval-lax --nbval-cell-timeout=$(NBVAL_TIMEOUT) solutions/

test: lint unit notebooks

release: setup
	$(PY) scripts/release.py --strip-solutions
	$(PY) scripts/release.py

release-check: setup
	$(PY) scripts/release.py --check

grade: setup
	$(PY) -m course_grading $(SUBMISSIONS) --out $(GRADING_OUT)

bench: setup
	$(PY) benchmarks/memory_model.py
	$(PY) benchmarks/packing.py
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/checkpointing.py
	$(PY) benchmarks/hf_memory.py
	$(PY) benchmarks/grading.py

# GPU checks: the memory model and checkpointing against the CUDA allocator. Needs a CUDA torch
# (make setup TORCH_SPEC=...); each script says so and exits 0 on a machine without a GPU.
bench-gpu: setup
	$(PY) benchmarks/memory_model.py --device cuda
	$(PY) benchmarks/gpu_hf_memory.py
	@# real configs at full size, sized for a 141 GB H200 (runs that do not fit say so)
	$(PY) benchmarks/gpu_held_out.py --out gpu_held_out_rows.json
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
	  && $(PY) benchmarks/checkpointing.py --device cuda || echo "no CUDA: checkpointing GPU run skipped"

# JupyterHub's proxy from npm, pinned by classroom/package-lock.json.
$(CHP): classroom/package.json classroom/package-lock.json
	npm ci --prefix classroom --no-audit --no-fund
	@touch $@

classroom: setup $(CHP)
	$(PY) classroom/run.py start $(CLASSROOM_ARGS)

classroom-stop:
	$(PY) classroom/run.py stop

classroom-clean:
	$(PY) classroom/run.py clean
