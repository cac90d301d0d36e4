# Two commands from a fresh clone: `make synth` and `make test`. Each builds .venv as needed.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Node 24 and the CDK CLI come from the venv and node_modules, never the system.
export PATH := $(CURDIR)/$(VENV)/bin:$(CURDIR)/node_modules/.bin:$(PATH)
CDK := $(CURDIR)/node_modules/.bin/cdk
# Extra CDK arguments, e.g. make synth CDK_ARGS="-c gpu_node_count=4"
CDK_ARGS ?=
# Extra trainer arguments for make train-local.
TRAIN_ARGS ?=

.PHONY: synth diff deploy destroy test train-local bench clean

$(VENV)/.synth-deps: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(VENV)/.dev-deps: $(VENV)/.synth-deps requirements-dev.txt requirements-train.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

node_modules/.installed: package-lock.json $(VENV)/.synth-deps
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

synth: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) synth --quiet $(CDK_ARGS)
	$(PY) -m tools.review cdk.out

diff: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) diff $(CDK_ARGS)

deploy: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) deploy --require-approval broadening $(CDK_ARGS)

destroy: $(VENV)/.synth-deps node_modules/.installed
	$(CDK) destroy $(CDK_ARGS)

test: $(VENV)/.dev-deps node_modules/.installed
	$(PY) -m pytest -q

train-local: $(VENV)/.dev-deps
	$(PY) -m training.train --local --workers 2 --model tiny --steps 30 --seq-len 128 \
		--micro-batch 4 --lr 3e-3 --warmup-steps 5 --storage-path $(CURDIR)/runs \
		--run-name local-tiny-$$(date +%s) --checkpoint-every 10 $(TRAIN_ARGS)

clean:
	rm -rf cdk.out .pytest_cache
