# NodeWright development targets. `make demo` and `make test` do their own set-up.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
COLL := .collections/ansible_collections/nodewright/fleet
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup system-packages venv link binaries demo test unit integration lint sanity build bench clean sim-up sim-down

setup: system-packages venv link binaries

# Debian packages from bindep.txt (busybox-static, skopeo, docker-registry, ...): installed
# when root with apt-get, otherwise one line naming them and the command.
system-packages:
	@bash simulator/system-packages.sh

$(BIN)/.installed: requirements.txt requirements-dev.txt simulator/pyproject.toml cli/pyproject.toml | system-packages
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q -e simulator
	$(BIN)/pip install -q -e cli
	touch $@

venv: $(BIN)/.installed

# The work tree itself is the collection: a symlink makes it importable as
# ansible_collections.nodewright.fleet without copying on every edit.
link: | system-packages
	@mkdir -p $(dir $(COLL))
	@ln -sfn ../../.. $(COLL)

binaries: | system-packages
	bash simulator/build-binaries.sh

demo: setup
	bin/nodewright-demo

test: setup
	$(BIN)/pytest tests

unit: venv link
	$(BIN)/pytest -m unit tests

integration: setup
	$(BIN)/pytest -m integration tests

lint: venv link
	$(BIN)/ruff check plugins tests simulator bench cli examples
	$(BIN)/ansible-lint --profile production
	shellcheck bin/nodewright-demo simulator/system-packages.sh simulator/build-binaries.sh .ci/run

build: link
	$(BIN)/ansible-galaxy collection build --force --output-path .

sim-up: setup
	$(BIN)/nodewright-sim up

sim-down:
	$(BIN)/nodewright-sim down
