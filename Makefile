# NodeWright development targets. `make demo` and `make test` do their own set-up.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
COLL := .collections/ansible_collections/nodewright/fleet
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.collections
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup system-packages venv link binaries demo test unit integration matrix matrix-venvs lint sanity molecule docs changelog build bench clean sim-up sim-down

setup: system-packages venv link binaries

# Debian packages from bindep.txt (busybox-static, skopeo, docker-registry, ...): installed
# when root with apt-get, otherwise one line naming them and the command.
system-packages:
	@bash simulator/system-packages.sh

$(BIN)/.installed: requirements.txt requirements-dev.txt simulator/pyproject.toml cli/pyproject.toml | system-packages
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "nodewright: installing the Python requirements into $(VENV) (one-time; pip's output in $(VENV)/pip.log)"
	@# pip and the build backends' notices go to the log, shown whole when an install fails.
	@( $(BIN)/pip install -q --disable-pip-version-check --upgrade pip && \
	   $(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt && \
	   $(BIN)/pip install -q --disable-pip-version-check -e simulator -e cli ) >$(VENV)/pip.log 2>&1 || \
	  { cat $(VENV)/pip.log; echo "nodewright: the Python requirements did not install (above)" >&2; exit 1; }
	@touch $@

venv: $(BIN)/.installed

# The work tree itself is the collection: a symlink makes it importable as
# ansible_collections.nodewright.fleet without copying on every edit.
link: | system-packages
	@mkdir -p $(dir $(COLL))
	@test "$$(readlink $(COLL))" = ../../.. || ln -sfn ../../.. $(COLL)

binaries: | system-packages
	bash simulator/build-binaries.sh

demo: setup
	bin/nodewright-demo

# The suite runs as two pytest processes side by side, each with a simulator of its own:
# SIDE_TESTS (upstream's conformance scenarios, the fleet-wide chaos and tuning walks and
# the operating journeys, mostly waiting on packages' sleeps, reboots and the reconciler)
# beside everything else. Its output is
# shown whole after the main run's; either failing fails the target. With
# NODEWRIGHT_SIM_REUSE (one shared simulator) it is one process.
SIDE_TESTS := tests/conformance tests/integration/test_chaos.py tests/integration/test_nvidia_tuning_sim.py \
	tests/integration/test_operating.py
test: setup
	@if [ -n "$$NODEWRIGHT_SIM_REUSE" ]; then exec $(BIN)/pytest tests; fi; \
	side_log=$$(mktemp); \
	$(BIN)/pytest $(SIDE_TESTS) >"$$side_log" 2>&1 & side=$$!; \
	$(BIN)/pytest tests $(addprefix --ignore=,$(SIDE_TESTS)); main=$$?; \
	wait $$side; side_rc=$$?; \
	echo "---- pytest $(SIDE_TESTS) (beside the run above)"; cat "$$side_log"; rm -f "$$side_log"; \
	echo "nodewright: main run exit $$main, side run exit $$side_rc"; \
	[ $$main -eq 0 ] && [ $$side_rc -eq 0 ]

# The collection on every other supported ansible-core (tests/compat/ansible_core_matrix.py):
# a virtualenv per release in .matrix/, its unit tests, ansible-doc and the demo's rollout.
matrix: setup
	$(BIN)/python tests/compat/ansible_core_matrix.py $(if $(VERSIONS),--versions $(VERSIONS))

matrix-venvs:
	$(PY) tests/compat/ansible_core_matrix.py --prepare-only

unit: venv link
	$(BIN)/pytest -m unit tests

integration: setup
	$(BIN)/pytest -m integration tests

# Dead code: vulture over the product's code; tests/unit/vulture_whitelist.py names what
# ansible-core and the libraries use by convention, and the few definitions kept on purpose.
lint: venv link
	$(BIN)/ruff check plugins tests simulator bench cli examples
	$(BIN)/vulture --min-confidence 60 plugins cli simulator bench tests/unit/vulture_whitelist.py
	$(BIN)/ansible-lint --profile production
	shellcheck bin/nodewright-demo simulator/system-packages.sh simulator/build-binaries.sh .ci/run

# ansible-test sanity on the collection as built (tests/sanity/run.sh; no ansible-test host needed).
sanity: venv link
	tests/sanity/run.sh

# The roles' molecule scenarios (extensions/molecule), each on a simulator of its own.
molecule: setup
	$(BIN)/molecule test --all

# The documentation site (antsibull-docs + Sphinx) in build/docs-site/build/html; the
# collection's docs are linted first.
DOCS_SITE := build/docs-site
docs: venv link
	$(BIN)/antsibull-docs lint-collection-docs --plugin-docs .
	rm -rf $(DOCS_SITE) && mkdir -p $(DOCS_SITE) && chmod 700 $(DOCS_SITE)
	$(BIN)/antsibull-docs sphinx-init --use-current --dest-dir $(DOCS_SITE) nodewright.fleet >/dev/null
	# Offline: intersphinx reads a local inventory of the ansible-core labels the pages use.
	$(BIN)/python docs/docsite/offline_inventory.py $(DOCS_SITE)/ansible_devel.inv
	printf "intersphinx_mapping = {'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', '../ansible_devel.inv')}\n" >> $(DOCS_SITE)/conf.py
	cd $(DOCS_SITE) && ./build.sh
	@echo "docs site: $(DOCS_SITE)/build/html/index.html"

# CHANGELOG.md from changelogs/changelog.yaml, after linting the fragments (one in
# changelogs/fragments/ per change; `antsibull-changelog release --version X` takes them into a release).
changelog: venv link
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-changelog generate

build: link
	$(BIN)/ansible-galaxy collection build --force --output-path .

sim-up: setup
	$(BIN)/nodewright-sim up

sim-down:
	$(BIN)/nodewright-sim down
