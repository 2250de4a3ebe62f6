# Shapes: two commands for people (`make lab`, `make test`), a few more for instructors.
# Everything runs inside .venv, created on first use. GPU users: make lab TORCH_SPEC="torch==2.11.0"
# (or any torch >= 2.6 built for their CUDA) -- torch is installed first so pip keeps it.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
# The student install is the base package; `make` installs every extra its targets use.
EXTRAS ?= lab,grader,dev,hf,classroom
CHP := classroom/node_modules/.bin/configurable-http-proxy
PYODIDE := web/node_modules/pyodide/pyodide.asm.wasm
CLASSROOM_ARGS ?=
NBVAL_TIMEOUT ?= 180
SUBMISSIONS ?= submitted
GRADING_OUT ?= grading
# make release SECRET_FILE=path: the class's edition, into CLASS_OUT (docs/instructors.md, 1.1);
# make grade SECRET_FILE=path grades with it (else $$SHAPES_COURSE_SECRET_FILE, or practice).
SECRET_FILE ?=
CLASS_OUT ?= class-release
# make secret SECRET_FILE=path COURSE_TERM=Fall-2026: a new course secret for that term (never
# over a file). Not TERM: that is the terminal's variable.
COURSE_TERM ?=
# make grade SCHEDULER=tls://HOST:PORT CLUSTER_CERTS=DIR grades on that Dask cluster, over TLS
# with the client certificates in DIR (docs/instructors.md, 3.8).
SCHEDULER ?=
CLUSTER_CERTS ?=
LESSON ?=
LAB_ARGS ?=
# What jupyter-config/ holds, also installed in the venv: Jupyter servers started without
# scripts/lab.py (formgrader in a hub, `jupyter lab` by hand) get the same settings.
VENV_JUPYTER := $(VENV)/etc/jupyter
JUPYTER_CONFIG := $(VENV_JUPYTER)/jupyter_server_config.d/course_grading.json \
	$(VENV_JUPYTER)/jupyter_server_config.d/shapes_lab.json \
	$(VENV_JUPYTER)/labconfig/default_setting_overrides.json

.PHONY: setup lab test lint unit notebooks release release-check grade secret bench bench-gpu help \
	classroom classroom-stop classroom-clean classroom-proxy formgrader feedback key

help:
	@echo "make lab      set up .venv (first time) and open the course in JupyterLab"
	@echo "make test     set up .venv and run every check: lint, unit tests, grading, notebooks"
	@echo "make secret   a new course secret SECRET_FILE=path for COURSE_TERM=Fall-2026 (mode 600)"
	@echo "make release  regenerate notebooks/ (student versions) from solutions/"
	@echo "              SECRET_FILE=path: your class's edition into CLASS_OUT=class-release"
	@echo "make key     SECRET_FILE=path: your class edition's answer key into KEY_OUT=class-key"
	@echo "make grade    autograde SUBMISSIONS=folder into GRADING_OUT=folder (SCHEDULER=tls://... CLUSTER_CERTS=dir: on Dask)"
	@echo "make formgrader  JupyterLab on GRADING_OUT's course: formgrader, manual grading"
	@echo "make feedback  after manual grading: GRADING_OUT's feedback, report and scores again (LESSON=...)"
	@echo "make bench    print the benchmark figures quoted in the README"
	@echo "make planner-page  the fine-tune planner as a static page in web/build (Pyodide, no server)"
	@echo "make bench-gpu  the GPU checks (CUDA allocator peaks, the five lessons on CUDA), for a machine with a GPU"
	@echo "make classroom  JupyterHub + nbgrader exchange + PostgreSQL gradebook here (root; Ctrl-C stops it)"
	@echo "              SECRET_FILE=path: the course secret it releases and grades with (required)"
	@echo "make classroom-stop  stop it from another terminal"

setup: $(VENV)/.installed $(JUPYTER_CONFIG)

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	@# rfc3987-syntax builds its parsers at import: every Jupyter tool (nbgrader, nbconvert,
	@# nbval's pytest) started about 3 s slower with it (nbgrader --version: 5.6 s against 2.4 s).
	-$(PY) -m pip uninstall --quiet --yes rfc3987-syntax
	@touch $@

# An editable install skips pyproject's data-files: formgrader's CSP extension and the quiet Lab
# settings (no news toast, no update check) go into the venv here.
$(VENV_JUPYTER)/%: jupyter-config/% | $(VENV)/.installed
	install -D -m 644 $< $@

# scripts/lab.py adds --allow-root as root (and says so) and reads jupyter-config/.
lab: setup
	$(PY) scripts/lab.py notebooks $(LAB_ARGS)

# Manual grading in a grading workspace's course (formgrader reads the folder's config).
formgrader: setup
	cd "$(GRADING_OUT)/course" && "$(abspath $(PY))" "$(abspath scripts/lab.py)" --instructor . $(LAB_ARGS)

# After manual grading: the feedback pages (GRADING_OUT/feedback/, what students get),
# report.csv, report.md and scores.csv made again from the gradebook's grades now, wherever they
# were entered (course_grading/refresh.py); withheld feedback is listed, and the exit status is 0.
feedback: setup
	$(PY) -m course_grading refresh "$(GRADING_OUT)" $(if $(strip $(LESSON)),--lessons $(LESSON))

# ruff reads the notebooks itself (solutions/ and notebooks/: checked, not reformatted: their
# cells keep the course's compact style); mypy checks course_lib with pyproject's [tool.mypy].
lint: setup
	$(VENV)/bin/ruff check course_lib course_grading tests benchmarks scripts classroom web nbgrader_config.py \
	  solutions notebooks
	$(VENV)/bin/ruff format --check course_lib course_grading tests benchmarks scripts classroom web nbgrader_config.py
	$(VENV)/bin/mypy course_lib
	$(PY) scripts/release.py --strip-solutions --check

# -rs: every skipped test is listed with its reason.
unit: setup classroom-proxy
	$(PY) -m pytest tests -q -rs --durations=25

notebooks: setup
	CI=1 $(PY) -m pytest -q -rs -p no:cacheprovider --nbval-lax --nbval-cell-timeout=$(NBVAL_TIMEOUT) solutions/

test: lint unit notebooks

# With SECRET_FILE: the class's edition (its own numbers, drawn from the course secret) into the
# new folder CLASS_OUT; notebooks/ (the self-study edition) is left as it is.
release: setup
ifneq ($(strip $(SECRET_FILE)),)
	$(PY) scripts/release.py --secret-file "$(SECRET_FILE)" --out "$(CLASS_OUT)"
else
	@# scripts/links.py: every lesson's Colab link, "how to answer" note and install cell, from
	@# the one repository address it holds
	$(PY) scripts/links.py
	$(PY) scripts/release.py --strip-solutions
	$(PY) scripts/release.py
endif

secret: setup
	@test -n "$(strip $(SECRET_FILE))" || { echo "give SECRET_FILE=path (and COURSE_TERM=...)"; exit 2; }
	$(PY) -m course_grading secret "$(SECRET_FILE)" $(if $(strip $(COURSE_TERM)),--term "$(COURSE_TERM)")

# make key SECRET_FILE=path: the answer key of the class edition that secret draws, into the new
# folder KEY_OUT (docs/instructors.md, 1.1).
KEY_OUT ?= class-key
key: setup
	@test -n "$(strip $(SECRET_FILE))" || { echo "give SECRET_FILE=path (the secret you release with)"; exit 2; }
	$(PY) -m course_grading key --secret-file "$(SECRET_FILE)" --out "$(KEY_OUT)"

release-check: setup
	$(PY) scripts/release.py --check

grade: setup
	$(PY) -m course_grading $(SUBMISSIONS) --out $(GRADING_OUT) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) \
	  $(if $(strip $(CLUSTER_CERTS)),--cluster-certs "$(CLUSTER_CERTS)") \
	  $(if $(strip $(SECRET_FILE)),--secret-file "$(SECRET_FILE)")

# The planner as a static page: Pyodide from its npm package (pinned by web/package-lock.json),
# the course's wheel beside it; serve web/build with any web server (README, "the page").
.PHONY: planner-page
planner-page: setup
	npm ci --prefix web --no-audit --no-fund
	$(PY) web/build.py

bench: setup
	$(PY) benchmarks/memory_model.py
	$(PY) benchmarks/packing.py
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/checkpointing.py
	$(PY) benchmarks/hf_memory.py
	$(PY) benchmarks/planner_throughput.py
	$(PY) benchmarks/grading.py
	$(PY) benchmarks/sandbox_envelope.py

# GPU checks: the memory model and checkpointing against the CUDA allocator, and the lessons on CUDA. Needs a CUDA torch
# (make setup TORCH_SPEC=...); each script says so and exits 0 on a machine without a GPU.
bench-gpu: setup
	$(PY) benchmarks/memory_model.py --device cuda
	$(PY) benchmarks/gpu_hf_memory.py
	@# real configs at full size, sized for a 141 GB H200 (runs that do not fit say so)
	$(PY) benchmarks/gpu_held_out.py --out gpu_held_out_rows.json
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
	  && $(PY) benchmarks/checkpointing.py --device cuda || echo "no CUDA: checkpointing GPU run skipped"
	@# the five lessons executed on CUDA, each GPU-path statement they make checked (exits 0 without CUDA)
	$(PY) benchmarks/gpu_lessons.py --out gpu_lessons.json

# JupyterHub's proxy from npm, pinned by classroom/package-lock.json.
$(CHP): classroom/package.json classroom/package-lock.json
	npm ci --prefix classroom --no-audit --no-fund
	@touch $@

# Pyodide for the planner page, from npm, pinned by web/package-lock.json.
$(PYODIDE): web/package.json web/package-lock.json
	npm ci --prefix web --no-audit --no-fund
	@touch $@

# For the tests, as .ci/run does: the proxy and Pyodide when npm is there; without npm (or when
# npm fails) the classroom test and the planner page's test are skipped with their reasons.
classroom-proxy:
	@if command -v npm >/dev/null; then \
	  $(MAKE) --no-print-directory $(CHP) || echo "could not install configurable-http-proxy: the classroom test will be skipped"; \
	  $(MAKE) --no-print-directory $(PYODIDE) || echo "could not install Pyodide: the planner page's test will be skipped"; \
	else echo "no npm: configurable-http-proxy and Pyodide not installed, the classroom and planner page tests will be skipped"; fi

classroom: setup $(CHP)
	$(PY) classroom/run.py start $(if $(strip $(SECRET_FILE)),--secret-file "$(SECRET_FILE)") $(CLASSROOM_ARGS)

# Stop and clean take the start's CLASSROOM_ARGS, so a custom --state is the one stopped.
classroom-stop:
	$(PY) classroom/run.py stop $(CLASSROOM_ARGS)

classroom-clean:
	$(PY) classroom/run.py clean $(CLASSROOM_ARGS)
