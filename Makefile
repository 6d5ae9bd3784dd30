# The three commands a newcomer runs (see README): `make demo`, `make lab` and `make test`. Each
# sets up .venv with what it needs.
PY := .venv/bin/python
NBVAL := --nbval --nbval-sanitize-with notebooks/sanitize.cfg --nbval-cell-timeout 600

.PHONY: demo lab test test-load test-fast lint book notebooks bench bench-compare clean gpu-check

# Let Python cache the bytecode of what it imports even where PYTHONDONTWRITEBYTECODE is set:
# bootstrap installs with --no-compile, and every rank process would otherwise recompile the
# torch and ppdit modules it imports, at every start.
unexport PYTHONDONTWRITEBYTECODE

demo:
	scripts/bootstrap.sh pipeline
	$(PY) -m ppdit demo

# The lessons in JupyterLab (everything they import, and ppdit's lab settings).
lab:
	scripts/lab.sh

# Everything CI checks: lint, unit + multi-rank tests, the labs (stub fails, solution passes),
# nbval over every committed notebook, and the offline book with its HTML scan; the tests and
# notebooks that state a claim (marked `claim`: bit for bit, or a named tolerance) run in the
# load lane, with one busy process per core beside them (scripts/load_lane.sh: issue 49).
test:
	EXTRAS=test,notebooks,book scripts/build_book.sh  # sets up .venv (npm installs meanwhile)
	$(PY) -m ruff check .
	# nbval replays the notebooks: their claims go to a scratch folder (also the default).
	# Ranks stay on the CPU (the committed outputs and the references are CPU results, compared
	# bit for bit) even on a GPU machine, where the tests marked `gpu` run on CUDA themselves.
	# The lanes in order, fastest first (tests/conftest.py marks each test by its folder).
	PPDIT_DEVICE=cpu PPDIT_CLAIMS_DIR=$$(mktemp -d) PPDIT_REQUIRE_BOOK=1 \
		$(PY) -m pytest tests/unit tests/ranks tests/system tests/gpu tests/book notebooks \
		$(NBVAL) -m "not claim" --durations=30
	scripts/load_lane.sh

# The load lane alone: every claim, while one busy process per core loads the machine.
test-load:
	scripts/bootstrap.sh test,notebooks
	scripts/load_lane.sh

# On a GPU machine: the GPU tests, then the GPU measurements, in stages within 8 minutes on one
# H100; writes gpu_runs/<gpu>-<date>.json. Runs on the interpreter whose torch sees a GPU, with
# no package index (scripts/gpu_check.sh: $$PYTHON, $$WHEELS); without CUDA it says so within
# seconds and writes nothing. ARGS=--dry-run lists the stages and their budgets.
gpu-check:
	scripts/gpu_check.sh $(ARGS)

# The quick inner loop: the unit lane (tests/unit/: nothing starts a process; about half a
# minute here), then ruff. The other lanes: tests/ranks, tests/system, tests/book, tests/gpu.
test-fast:
	scripts/bootstrap.sh test
	@start=$$(date +%s); $(PY) -m pytest tests/unit -q; status=$$?; \
		echo "make test-fast: the unit lane took $$(( $$(date +%s) - start )) s"; exit $$status
	$(PY) -m ruff check .

lint:
	scripts/bootstrap.sh test
	$(PY) -m ruff check .

book:
	EXTRAS=test,book scripts/build_book.sh

# Re-execute every notebook in place (after changing code they use), then commit the outputs.
notebooks:
	scripts/bootstrap.sh test
	$(PY) scripts/execute_notebooks.py notebooks/[0-9]*.ipynb

bench:
	scripts/bootstrap.sh
	$(PY) benchmarks/launch.py
	$(PY) benchmarks/step_split.py
	$(PY) benchmarks/layer_split.py
	$(PY) benchmarks/pipefusion.py
	$(PY) benchmarks/rebalance.py
	$(PY) benchmarks/tensor_parallel.py
	$(PY) benchmarks/vae.py
	$(PY) benchmarks/bringup.py
	$(PY) benchmarks/sequence_parallel.py
	$(PY) benchmarks/caching.py
	$(PY) benchmarks/experts.py

# Two commits side by side: make bench-compare REF=<commit> [ARGS="--bench step_split"]. Each
# round runs both codes' benchmarks in alternating order; verdicts on the per-round new / old.
bench-compare:
	scripts/bootstrap.sh
	$(PY) scripts/bench_compare.py $(REF) $(ARGS)

clean:
	rm -rf out .pytest_cache book/_build book/vendor book/node_modules
