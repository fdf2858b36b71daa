#!/usr/bin/env bash
# bash scripts/gpu_window.sh OUT [SECONDS]   (on a lent GPU machine: make gpu-check's tier, then make gpu-perf)
#
# One short GPU window as one call: the gpu tier (make gpu-check, benchmark skipped), then MASFormer's patterns
# at the paper's shape (python -m scaleformer.bench.gpu_masformer: a training step and a cached token of full,
# block n/8, l = L/6 and L/3 at n = 8,192 on Pythia-1.4B's shape, beside the counted bill's peak; at most
# GPU_WINDOW_MASFORMER_S, default 240), the causal kernels against their peers (python -m
# scaleformer.bench.causal_peers --device cuda; at most GPU_WINDOW_PEERS_S, default 90), then table1's
# training cells off and on and the generation rows (scripts/gpu_perf.py) in what is left of SECONDS
# (default 500), everything packed into OUT/window.tgz (the runs'
# records without weights) plus OUT/gpu-perf.md and OUT/masformer.md, so a window that ends early still brings back
# every cell and row it measured.
set -u
out=${1:?usage: bash scripts/gpu_window.sh OUT [SECONDS]}
total=${2:-500}
work=$(mktemp -d)
start=$(date +%s)
export PYTHONUNBUFFERED=1
# GPU_WINDOW_TIER=0: prepare .venv-gpu only (the tier ran earlier in the window); GPU_PERF_ARGS: more
# arguments for gpu_perf.py (e.g. --variants after; --gen-budget-s S: generation's share of the budget,
# default 150; --parts decode,docs: the generation rows only, in the whole budget; --variants after,compiled
# --cells sled/summscreen --parts train: the compiled layers against the defaults where the host bounds the step)
tier=$([ "${GPU_WINDOW_TIER:-1}" = 0 ] && echo " --skip-tier")
make gpu-check DIR="$work/gpu-check" GPU_CHECK_ARGS="--skip-bench$tier" >"$work/gpu-check.log" 2>&1
echo "gpu-check: exit $?"; tail -n 4 "$work/gpu-check/summary.md" 2>/dev/null | cut -c1-300
py=.venv-gpu/bin/python; [ -x "$py" ] || py=python3
mkdir -p "$work/masformer"
timeout "${GPU_WINDOW_MASFORMER_S:-240}" "$py" -m scaleformer.bench.gpu_masformer --out "$work/masformer/masformer" \
  >"$work/masformer.log" 2>&1
echo "masformer: exit $? after $(( $(date +%s) - start )) s"; tail -n 8 "$work/masformer.log" | cut -c1-300
# the causal kernels against sdpa's dense mask and compiled flex (every phase: flex has a backward on CUDA), n = 8,192
timeout "${GPU_WINDOW_PEERS_S:-90}" "$py" -m scaleformer.bench.causal_peers --device cuda --n 8192 \
  --budget-s "${GPU_WINDOW_PEERS_S:-90}" --out "$work/masformer/causal-peers-cuda" >"$work/peers.log" 2>&1
echo "peers: exit $? after $(( $(date +%s) - start )) s"; tail -n 20 "$work/peers.log" | cut -c1-300
left=$(( total - ($(date +%s) - start) ))
# the GPU's clocks, power, temperature and use 4 times a second while the cells run (OUT/window.tgz:
# nvidia-smi.csv): a slow micro-batch's ended_at (unix time) finds the clock it ran at, NVML or not
smi=""
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,utilization.gpu \
    --format=csv -lms 250 >"$work/nvidia-smi.csv" 2>&1 &
  smi=$!
fi
# no cell or generation row starts in the last GPU_WINDOW_RESERVE s (default 150: a BookSum cell, the
# cost table, a compile); the timeout is the backstop
timeout "$left" "$py" scripts/gpu_perf.py --out "$work/gpu-perf" --tables "$work/dryrun" --runs "$work/runs" \
  --budget-s $(( left - ${GPU_WINDOW_RESERVE:-150} )) ${GPU_PERF_ARGS:-} >"$work/gpu-perf.log" 2>&1
echo "gpu-perf: exit $? after $(( $(date +%s) - start )) s"
[ -n "$smi" ] && kill "$smi" 2>/dev/null
tail -n 50 "$work/gpu-perf.log" | cut -c1-400
mkdir -p "$out"
tar czf "$out/window.tgz" -C "$work" --exclude='*.ckpt' --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' .
cp "$work/gpu-perf/gpu-perf.md" "$work/masformer/masformer.md" "$work/masformer/causal-peers-cuda.md" "$out/" 2>/dev/null
ls -la "$out"
