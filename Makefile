# The two commands that matter: `make run` (the arena on embedded defaults) and
# `make test` (the whole suite). Both install what is missing first.
.PHONY: setup run test lint bench doctor

setup:
	@bash scripts/setup.sh

run: setup
	@.venv/bin/python scripts/run_arena.py

test: setup
	@bash scripts/test.sh

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench: setup
	@bash scripts/bench.sh

doctor: setup
	@.venv/bin/python manage.py sandbox_doctor --json
