# The two commands a newcomer runs (see README): `make demo` and `make test`. Each sets up .venv.
PY := .venv/bin/python
NBVAL := --nbval --nbval-sanitize-with notebooks/sanitize.cfg --nbval-cell-timeout 600

.PHONY: demo test lint book notebooks bench clean

demo:
	scripts/bootstrap.sh
	$(PY) -m ppdit demo

# Everything CI checks: lint, unit + multi-rank tests, the labs (stub fails, solution passes),
# nbval over every committed notebook, and the offline book with its HTML scan.
test:
	scripts/bootstrap.sh test,book
	$(PY) -m ruff check .
	EXTRAS=test,book scripts/build_book.sh
	PPDIT_REQUIRE_BOOK=1 $(PY) -m pytest tests notebooks $(NBVAL)

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
	$(PY) benchmarks/step_split.py
	$(PY) benchmarks/layer_split.py
	$(PY) benchmarks/tensor_parallel.py
	$(PY) benchmarks/vae.py
	$(PY) benchmarks/bringup.py
	$(PY) benchmarks/sequence_parallel.py

clean:
	rm -rf out .pytest_cache book/_build book/vendor book/node_modules
