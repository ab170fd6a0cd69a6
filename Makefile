# Two commands on a fresh machine:  `make run`  and  `make test`  (see README.md).
# Both install what they need first: Debian packages (tools/system-packages.sh), then a
# virtualenv pinned by constraints.txt, so every machine runs what the tests were run with.
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
CONSTRAINTS := constraints.txt
EXTRAS      := dev,local-llm,sim,realsense,overcooked,mcap,metrics,service,live,fleet,ros2
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: run test stress hint lint eval bench critics system constraints clean

system:
	@tools/system-packages.sh $(PYTHON)

STEP        := tools/step.sh $(VENV)/setup.log
# llama-cpp-python builds from source, for any x86-64 with AVX2, not tuned to the building CPU
# (a GGML_NATIVE build segfaulted at its first token on a 2-core Xeon with AVX-512 and AMX),
# without the multimodal library (mtmd/llava: onboard sends text only; llama_cpp imports it
# only for image chat formats): 202 s instead of 228 s on 2 quiet cores (345 s of CPU, not
# 407). The wheel is kept in ~/.cache/onboard keyed by version and flags, so a rebuilt venv on
# this machine reuses it; pip's own cache is not used: a wheel cached there may have been
# built with other flags.
LLAMA_FLAGS := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
LLAMA_PIN   := $(shell grep -i '^llama[-_]cpp[-_]python==' $(CONSTRAINTS))
LLAMA_KEY   := $(shell echo '$(LLAMA_PIN) $(LLAMA_FLAGS)' $$(uname -m) | sha256sum | cut -c1-12)
LLAMA_WHEEL := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/onboard/llama-cpp-python/$(LLAMA_KEY)

$(STAMP): pyproject.toml $(CONSTRAINTS) | system
	@$(STEP) "creating the virtualenv $(VENV)" "a few seconds" $(PYTHON) -m venv $(VENV)
	@$(STEP) "upgrading pip" "about 10 s" $(BIN)/pip install --upgrade pip
	@if ls $(LLAMA_WHEEL)/*.whl >/dev/null 2>&1; then \
	  echo "onboard setup: llama-cpp-python already built here ($(LLAMA_WHEEL))"; \
	else \
	  $(STEP) "building llama.cpp for llama-cpp-python, once per machine" \
	    "about 3.5 min on 2 quiet cores, 5 under load" \
	    env CMAKE_ARGS="$(LLAMA_FLAGS)" $(BIN)/pip wheel --no-deps --no-cache-dir \
	    -w $(LLAMA_WHEEL) '$(LLAMA_PIN)'; \
	fi
	@$(STEP) "installing onboard and its pinned packages" "about 1-2 min" \
	  $(BIN)/pip install -c $(CONSTRAINTS) --find-links $(LLAMA_WHEEL) --only-binary llama-cpp-python \
	  -e '.[$(EXTRAS)]'
	@touch $(STAMP)

## The main job on the embedded defaults: the simulated robot, SmolLM2 on loopback.
## A demo: it prints the verdict, and fails only for a crash or a configuration error
## (exit codes 1 "task failed" and 0 pass; see the README's exit code table).
run: system $(STAMP)
	$(BIN)/onboard check
	@echo "onboard: one Engage episode with the local SmolLM2, on the wall clock (up to 40 s)"
	@code=0; $(BIN)/onboard run engage --scenario skills/scenarios/person-object.toml || code=$$?; \
	  if [ $$code -gt 1 ]; then exit $$code; fi
	@$(MAKE) --no-print-directory hint

## Lint, type-check and every test (the slow end-to-end test on the real model included).
## python -P: the repository root is not on sys.path; tests import the installed onboard only.
## One pytest worker per core (pytest-xdist), a test file's tests together on one worker (its
## module fixtures are built once). Every test's duration goes to test-durations.log (kept by
## the run, git-ignored).
PYTEST      := env ONBOARD_REQUIRE_LOCAL_LLM=1 ONBOARD_REQUIRE_REALSENSE=1 $(BIN)/python -P -m pytest \
               -n auto --dist loadfile
test: system $(STAMP) lint
	@echo "onboard: every test, on $$(nproc) workers (about 8 min on 2 quiet cores)"
	$(PYTEST) -p no:randomly --durations=0 --durations-min=0 --junitxml=test-durations.xml \
	  $(PYTEST_ARGS) \
	  | tee test-durations.log
	@$(MAKE) --no-print-directory hint

## How to call onboard from now on: it lives in the virtualenv, not on the PATH.
hint:
	@echo
	@echo "onboard is installed in $(VENV). Call it as $(BIN)/onboard, or once per shell:"
	@echo "    source $(BIN)/activate    # then: onboard --help"

## The whole suite in random order (pytest-randomly) under a one-core busy loop, RUNS times:
## flakes found here before CI finds them. Each run prints its seed (--randomly-seed=N): the
## same order again is `make test PYTEST_ARGS="-p randomly --randomly-seed=N"`.
RUNS ?= 1
stress: system $(STAMP)
	tools/stress.sh $(RUNS) $(PYTEST) -q

lint: $(STAMP)
	@echo "onboard: lint (ruff) and type-check (mypy: about 15 s, a minute on a first run)"
	$(BIN)/ruff check runtime drivers tests bench models tools
	$(BIN)/ruff format --check runtime drivers tests bench models tools
	$(BIN)/python tools/typecheck.py

eval: $(STAMP)
	$(BIN)/onboard eval engage --trials 10

bench: $(STAMP)
	$(BIN)/python bench/decision_loop.py
	$(BIN)/python bench/mapping_accuracy.py
	$(BIN)/python bench/arm_drivers.py
	$(BIN)/python bench/parsers.py
	$(BIN)/python bench/detector.py

## Rebuild every shipped team-task critic (models/critics/README.md): the train extra (torch),
## the team stand-in's data, about 20 minutes on 2 cores; the same files every time.
critics: $(STAMP)
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[$(EXTRAS),train]'
	$(BIN)/python models/critics/build.py

## Re-pin constraints.txt from the current virtualenv (after a deliberate upgrade).
constraints: $(STAMP)
	{ echo "# Every package make installs, pinned; regenerate with 'make constraints'."; \
	  $(BIN)/pip freeze --all --exclude-editable | grep -v -e '^onboard' -e '^pip=='; } > $(CONSTRAINTS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
