# The two commands a newcomer runs (see README): `make demo` and `make test`. Each sets up .venv.
PY := .venv/bin/python

.PHONY: demo test lint bench clean

demo:
	scripts/bootstrap.sh
	$(PY) -m ppdit demo

test:
	scripts/bootstrap.sh test
	$(PY) -m ruff check .
	$(PY) -m pytest

lint:
	scripts/bootstrap.sh test
	$(PY) -m ruff check .

bench:
	scripts/bootstrap.sh
	$(PY) benchmarks/step_split.py

clean:
	rm -rf out .pytest_cache book/_build
