# Two commands on a fresh machine:  `make run`  and  `make test`  (see README.md).
# Both install what they need first: Debian packages (tools/system-packages.sh), then a
# virtualenv pinned by constraints.txt, so every machine runs what the tests were run with.
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
CONSTRAINTS := constraints.txt
EXTRAS      := dev,local-llm,sim,realsense,overcooked

.PHONY: run test lint eval bench critics system constraints clean

system:
	@tools/system-packages.sh $(PYTHON)

$(STAMP): pyproject.toml $(CONSTRAINTS) | system
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# llama-cpp-python builds from source (about 4 minutes on 2 cores) for any x86-64 with
	# AVX2, not tuned to the building CPU: a GGML_NATIVE build segfaulted at its first token
	# on a 2-core Xeon with AVX-512 and AMX. No pip cache: a cached wheel may have other flags.
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip install --quiet --no-cache-dir -c $(CONSTRAINTS) \
	  llama-cpp-python
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	touch $(STAMP)

## The main job on the embedded defaults: the simulated robot, SmolLM2 on loopback.
## A demo: it prints the verdict, and fails only for a crash or a configuration error
## (exit codes 1 "task failed" and 0 pass; see the README's exit code table).
run: system $(STAMP)
	$(BIN)/onboard check
	@code=0; $(BIN)/onboard run engage --scenario skills/scenarios/person-object.toml || code=$$?; \
	  if [ $$code -gt 1 ]; then exit $$code; fi

## Lint, type-check and every test (the slow end-to-end test on the real model included).
## python -P: the repository root is not on sys.path; tests import the installed onboard only.
test: system $(STAMP) lint
	ONBOARD_REQUIRE_LOCAL_LLM=1 ONBOARD_REQUIRE_REALSENSE=1 $(BIN)/python -P -m pytest

lint: $(STAMP)
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
