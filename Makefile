# The two commands that matter: `make run` (the arena on embedded defaults) and
# `make test` (the whole suite). Both install what is missing first: `make run` what its
# first page needs (`setup`: the runtime, requirements.lock), then the sandboxes' packages
# and toolchain in the background; `setup-test` installs everything with the test tools
# (requirements-test.lock), which `make test`, `make lint` and `make bench` need.
.PHONY: setup setup-sandboxes setup-test run test soak lint bench doctor deploy deploy-down deploy-check

setup:
	@bash scripts/setup.sh run

# What the sandboxes run (Debian packages, the coding toolchain): `make run` installs it
# in the background once its first page answers; the doctor needs it first.
setup-sandboxes:
	@bash scripts/setup.sh sandboxes

setup-test:
	@bash scripts/setup.sh test

run: setup
	@.venv/bin/python scripts/run_arena.py

test: setup-test
	@bash scripts/test.sh

# The long variants `make test` leaves out (pytest -m soak): more kill phases, more stops.
soak: setup-test
	@bash scripts/test.sh -m soak

lint: setup-test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

bench: setup-test
	@bash scripts/bench.sh

# The doctor leases a sandbox slot like a worker does: the database must be migrated.
doctor: setup setup-sandboxes
	@.venv/bin/python manage.py migrate --noinput -v 0
	@.venv/bin/python manage.py sandbox_doctor --json

# deploy/compose.yaml up on the Docker engine of $DOCKER_HOST: the images built offline,
# the secrets made once (deploy/arena.env), the stack started; deploy-down stops it and
# keeps its volumes (docs/deployment.md, "Compose").
deploy: setup setup-sandboxes
	@bash scripts/deploy_up.sh

deploy-down:
	@ARENA_ENV_FILE=$${ARENA_ENV_FILE:-$(CURDIR)/deploy/arena.env} docker-compose -f deploy/compose.yaml -p $${COMPOSE_PROJECT_NAME:-arena} down

# deploy/compose.yaml on the private Docker engine from the offline-built images: up,
# a battle submitted, run, judged and rated through its proxy, down (docs/deployment.md).
deploy-check: setup-test
	@.venv/bin/python scripts/deploy_check.py
