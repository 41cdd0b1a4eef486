# Two entry points: `make demo` and `make test`. Each creates .venv if missing.
# `make test` also installs the Debian packages the service tests drive (chromium, postgresql) when they are
# missing; it fails, loudly, when it cannot. `make serve` starts the web service on http://127.0.0.1:8000/.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SYSTEM_PACKAGES := chromium postgresql

.PHONY: demo test serve system-deps clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

# idempotent: apt-get runs only when a program is missing
system-deps:
	@missing=""; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	  echo "installing Debian packages:$$missing"; \
	  log=$$(mktemp); \
	  { $$sudo apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing; } >$$log 2>&1 || \
	  { cat $$log >&2; echo "error: could not install$$missing; the browser and PostgreSQL tests need them" >&2; exit 1; }; \
	  rm -f $$log; \
	fi

demo: $(VENV)/.installed
	$(BIN)/traincast demo

# the suite runs on every logical CPU up to four (pytest-xdist)
test: $(VENV)/.installed system-deps
	$(BIN)/python -m pytest -n logical --maxprocesses 4

serve: $(VENV)/.installed
	$(BIN)/traincast serve

clean:
	rm -rf $(VENV) build src/*.egg-info
