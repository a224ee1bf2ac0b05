# The two commands a newcomer needs: `make demo` and `make test`. Each builds .venv from nothing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tokenmill-installed
REAL_CORPORA ?= $(abspath ../real_corpora)

.PHONY: demo test test-slow install bench bench-check bench-tables clean

install: $(STAMP)

# pip --no-compile, then compileall on every core at once (pip compiles on one: a minute more).
# Without .pyc files every process compiles torch again where PYTHONDONTWRITEBYTECODE is set (CI
# images often set it): a second more per process, and the suite starts hundreds. torch's
# testing/_internal/py312_intrinsics.py is Python 3.12-only syntax.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -e '.[test]'
	$(BIN)/python -m compileall -q -j 0 -x py312_intrinsics "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null \
		|| echo "note: some installed files did not byte-compile; Python compiles them when imported"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tokenmill demo

test: $(STAMP)
	$(BIN)/ruff check src
	$(BIN)/ruff format --check src
	$(BIN)/mypy  # config: [tool.mypy] in pyproject.toml (files = src)
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=25 -m "not slow"

# The multi-process and long end-to-end tests (torchrun kills and restarts, ZeRO/TP/PP/CP layouts, two
# nodes, a Ray cluster, compiled training): about 8 minutes more on 2 cores. CI runs them after `make test`.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=25 -m slow

# Side-by-side benchmarks (results in BENCHMARKS.md); needs the demo's run directory. record.py writes a
# script's result with its commit, command, versions and the other processes' load during the run.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	test -f runs/demo/.stages/tokenize.json || $(BIN)/tokenmill demo
	$(BIN)/python benchmarks/record.py benchmarks/results/tokenize.json -- benchmarks/bench_tokenize.py --run runs/demo --cores 1 2 --repeats 3
	$(BIN)/python benchmarks/record.py benchmarks/results/tokenize_no_check.json -- benchmarks/bench_tokenize.py --run runs/demo --cores 1 2 --repeats 3 --no-heldout-check
	$(BIN)/python benchmarks/record.py benchmarks/results/tokenize_copies4.json -- benchmarks/bench_tokenize.py --run runs/demo --cores 1 2 --repeats 3 --copies 4
	$(BIN)/tokenmill calibrate --threads 2 --seconds 4
	$(BIN)/python benchmarks/record.py benchmarks/results/train_speed_demo.json -- benchmarks/bench_train_speed.py --run runs/demo --set train.micro_batch=16 --set train.grad_accum=1 --steps 30 --repeats 3 --threads 2
	$(BIN)/python benchmarks/record.py benchmarks/results/train_speed_25m.json -- benchmarks/bench_train_speed.py --run runs/demo --set train.micro_batch=16 --set train.grad_accum=1 --steps 12 --repeats 2 --threads 2 --no-compile \
		--set model.d_model=512 --set model.n_layers=8 --set model.n_heads=8
	$(BIN)/python benchmarks/bench_compile.py --run runs/demo --set train.micro_batch=16 --set train.grad_accum=1 --steps 30 --repeats 2 --threads 2
	$(BIN)/python benchmarks/bench_fused_projections.py
	$(BIN)/python benchmarks/record.py benchmarks/results/vs_nanogpt_demo.json -- benchmarks/bench_vs_nanogpt.py --run runs/demo --set train.micro_batch=16 --set train.grad_accum=1 --threads 2 --steps 30 --repeats 3 --seconds 180
	$(BIN)/python benchmarks/record.py benchmarks/results/vs_nanogpt_25m.json -- benchmarks/bench_vs_nanogpt.py --run runs/demo --set train.micro_batch=16 --set train.grad_accum=1 --threads 2 --steps 12 --repeats 2 --seconds 0 \
		--set model.d_model=512 --set model.n_layers=8 --set model.n_heads=8
	$(BIN)/python benchmarks/record.py benchmarks/results/train_memory.json -- benchmarks/bench_train_memory.py --run runs/demo --set train.micro_batch=16 --threads 2
	$(BIN)/python benchmarks/bench_parallel_memory.py --run runs/demo --set train.micro_batch=16 --set train.grad_accum=1
	$(BIN)/python benchmarks/bench_pipeline_bubble.py --run runs/demo --steps 8
	$(BIN)/python benchmarks/record.py benchmarks/results/train_quality.json -- benchmarks/bench_train_quality.py --run runs/demo --set train.micro_batch=16 --set train.grad_accum=1 --seconds 480 --threads 2
	$(BIN)/python benchmarks/record.py benchmarks/results/loader_demo.json -- benchmarks/bench_loader.py --run runs/demo
	$(BIN)/python benchmarks/record.py benchmarks/results/health_overhead.json -- benchmarks/bench_health_overhead.py --run runs/demo --threads 1 --repeats 15
	$(BIN)/python benchmarks/record.py benchmarks/results/demo_wallclock.json -- benchmarks/bench_demo.py
	test -d $(REAL_CORPORA) || bash ../shared/corpora/fetch_real_corpora.sh $(REAL_CORPORA)
	$(BIN)/python benchmarks/record.py benchmarks/results/dirty_web.json -- benchmarks/bench_dirty_web.py --corpora $(REAL_CORPORA)  # ~1 min; needs datatrove==0.10.1 spacy
	$(BIN)/python benchmarks/record.py benchmarks/results/dirty_web_confirm.json -- benchmarks/bench_dirty_web.py --corpora $(REAL_CORPORA) --seed 7
	$(BIN)/python benchmarks/record.py benchmarks/results/kind_detect.json -- benchmarks/bench_kind_detect.py --corpora $(REAL_CORPORA)  # ~1 min
	$(BIN)/python benchmarks/record.py benchmarks/results/perplexity_gate.json -- benchmarks/bench_perplexity_gate.py --corpora $(REAL_CORPORA) --seeds 41 7  # ~3 min
	$(BIN)/python benchmarks/record.py benchmarks/results/dirty_web_model.json --result /tmp/dwm.json -- benchmarks/bench_dirty_web_model.py \
		--corpora $(REAL_CORPORA) --work /tmp/dwm --json /tmp/dwm.json --small-tokens 600000 --large-tokens 1200000 --lr 0.002  # ~25 min
	git worktree add --detach /tmp/tm-hostile-base b498ba9 2>/dev/null || true  # main before the depth, size and checkpoint bounds
	$(BIN)/python benchmarks/record.py benchmarks/results/hostile_inputs.json -- benchmarks/bench_hostile_inputs.py \
		--baseline-src /tmp/tm-hostile-base/src  # ~25 min
	$(BIN)/python benchmarks/record.py benchmarks/results/hostile_inputs_labelled.json -- benchmarks/bench_hostile_inputs.py \
		--baseline-src /tmp/tm-hostile-base/src --only classify_labelled_big safety_labelled_big --repeats 1  # ~8 min
	$(BIN)/python benchmarks/record.py benchmarks/results/hostile_inputs_normal.json -- benchmarks/bench_hostile_inputs.py \
		--baseline-src /tmp/tm-hostile-base/src --normal $(REAL_CORPORA)/web_html/python3.11-doc --normal-files 444 --only normal_html  # ~2 min
	$(BIN)/python benchmarks/record.py benchmarks/results/curate_vs_datatrove.json --result /tmp/tokenmill_curate.json -- benchmarks/bench_curate_vs_datatrove.py --corpus $(REAL_CORPORA)/web_html/python3.11-doc --json /tmp/tokenmill_curate.json
	TOKENMILL_REAL_CORPORA=$(REAL_CORPORA) $(BIN)/python benchmarks/record.py benchmarks/results/minhash.json -- benchmarks/bench_minhash.py
	TOKENMILL_REAL_CORPORA=$(REAL_CORPORA) $(BIN)/python benchmarks/bench_substring_dedup.py
	$(BIN)/python benchmarks/bench_semantic_contamination.py --corpus $(REAL_CORPORA)
	git worktree add --detach /tmp/tm-dedup-base 1edc841 2>/dev/null || true
	$(BIN)/python benchmarks/bench_dedup_scale.py --corpus $(REAL_CORPORA) --docs 1000000 --repeats 2 \
		--baseline-src /tmp/tm-dedup-base/src --ray-cluster --kill-node-after 60 --datatrove --json benchmarks/results/dedup_scale.json  # about 1.5 h
	$(BIN)/python benchmarks/bench_dedup_scale.py --corpus $(REAL_CORPORA) --docs 5000000 --json benchmarks/results/dedup_scale.json  # about 40 min
	$(BIN)/tokenmill mixture optimize examples/mixture/optimize.yaml  # about an hour
	$(BIN)/python benchmarks/record.py benchmarks/results/mixture_opt/confirm.json -- benchmarks/bench_mixture_confirm.py examples/mixture/optimize.yaml --baselines uniform  # 40 min
	$(BIN)/tokenmill source-value examples/mixture/source_value.yaml
	$(BIN)/python benchmarks/bench_scaling_prediction.py  # about an hour: the example IsoFLOP sweep + its 4x held-out run
	$(BIN)/python benchmarks/bench_critical_batch.py --demo runs/demo --scaling runs/mixture-opt/data  # the mixture benchmark's store; about 1.5 h
	git worktree add --detach /tmp/tm-eval-base 4ae2fee 2>/dev/null || true
	$(BIN)/python benchmarks/bench_eval_cost.py --run runs/demo --baseline-src /tmp/tm-eval-base/src
	git worktree add --detach /tmp/tm-hostile-base b498ba9 2>/dev/null || true
	$(BIN)/python benchmarks/record.py benchmarks/results/sandbox.json -- benchmarks/bench_sandbox.py --n 30 --baseline-src /tmp/tm-hostile-base/src  # ~1 min
	$(BIN)/python benchmarks/record.py benchmarks/results/eval_hf_reference.json -- benchmarks/eval_hf_reference.py --run runs/demo  # ~25 s
	$(BIN)/python benchmarks/record.py benchmarks/results/eval_tiers.json -- benchmarks/bench_eval_tiers.py --run runs/demo --reps 3 --pin  # ~30 min
	$(BIN)/python benchmarks/record.py benchmarks/results/eval_tiers_heavy.json -- benchmarks/bench_eval_tiers.py --run runs/demo --reps 3 --pin --tasks heavy  # ~36 min
	$(BIN)/python benchmarks/bench_model_collapse.py  # about 25 minutes
	$(BIN)/python benchmarks/record.py benchmarks/results/continued_pretraining.json --result /tmp/tm_cpt.json -- \
		benchmarks/bench_continued_pretraining.py --work runs/cpt --json /tmp/tm_cpt.json  # about 40 minutes
	$(BIN)/python benchmarks/record.py benchmarks/results/context_extension.json --result /tmp/tm_ctx.json -- \
		benchmarks/bench_context_extension.py --work runs/ctx --json /tmp/tm_ctx.json  # ~1.5 h here; the recorded one ran on an H100
	$(MAKE) bench-tables

# The quick benchmarks again (a few minutes): every ratio more than 15% below its recorded value
# (benchmarks/results/bench_check.json) is flagged and the exit status is 1.
bench-check: $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	test -f runs/demo/.stages/tokenize.json || $(BIN)/tokenmill demo
	test -d $(REAL_CORPORA) || bash ../shared/corpora/fetch_real_corpora.sh $(REAL_CORPORA)
	$(BIN)/python benchmarks/bench_check.py --corpus $(REAL_CORPORA)

# BENCHMARKS.md's generated sections, rewritten from benchmarks/results/ (a test fails when they differ).
bench-tables: $(STAMP)
	$(BIN)/python benchmarks/tables.py

clean:
	rm -rf $(VENV) runs .pytest_cache
