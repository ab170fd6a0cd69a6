# Two commands on a fresh machine:  `make run`  and  `make test`  (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint eval bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# llama-cpp-python builds from source the first time (about 4 minutes on 2 cores)
	$(BIN)/pip install --quiet -e '.[dev,local-llm,sim,realsense]'
	touch $(STAMP)

## The main job on the embedded defaults: the simulated robot, SmolLM2 on loopback.
run: $(STAMP)
	$(BIN)/onboard check
	$(BIN)/onboard run engage --scenario skills/scenarios/person-object.toml

## Lint, type-check and every test (the slow end-to-end test on the real model included).
test: $(STAMP) lint
	ONBOARD_REQUIRE_LOCAL_LLM=1 ONBOARD_REQUIRE_REALSENSE=1 $(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check runtime drivers tests bench models
	$(BIN)/ruff format --check runtime drivers tests bench models
	$(BIN)/mypy

eval: $(STAMP)
	$(BIN)/onboard eval engage --trials 10

bench: $(STAMP)
	$(BIN)/python bench/decision_loop.py
	$(BIN)/python bench/mapping_accuracy.py
	$(BIN)/python bench/arm_drivers.py
	$(BIN)/python bench/detector.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
