#!/bin/bash
# The job environment (remote/ops/jobenv.py) on a real GPU machine: examples/plain under torchrun (NCCL, one
# rank a GPU), cold then warm. Prints whether anything new appeared under /tmp (it must not: every
# compile artifact belongs in the per-version cache), the cache's size after each run, and the ranks'
# marked lines. Usage: bash bench/gpu_jobenv.sh [NPROC]   (run where torch and its GPUs are)
set -u
nproc=${1:-2}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "$HOME/jobenv-XXXXXX")
cp -r "$repo/examples/plain/." "$work" && cd "$work" || exit 1
python3 prepare.py >/dev/null
cache=$work/cache
stamp=$work/.stamp; touch "$stamp"
snap() { find /tmp "$HOME/.triton" -maxdepth 1 -newer "$stamp" 2>/dev/null | sort; }
export TORCHINDUCTOR_CACHE_DIR=$cache/inductor TRITON_CACHE_DIR=$cache/triton TMPDIR=$cache/tmp \
  TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1 PET_TEE=3 PET_LOG_DIR=$work/ranks \
  'TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}]: ' PYTHONUNBUFFERED=1
mkdir -p "$TMPDIR"
for run in cold warm; do
  python3 -m torch.distributed.run --nproc-per-node "$nproc" train.py --max-iters 100 --log-interval 25 > "$run.log" 2>&1
  echo "== $run: exit $?, cache $(find "$cache" -type f | wc -l) files, $(du -sh "$cache" | cut -f1)"
  grep -E '^\[rank[0-9]+\]: (rank|iter|saved)' "$run.log" | head -8
done
echo "== new under /tmp or ~/.triton (must be empty):"; snap
echo "== per-rank logs: $(find "$work/ranks" -type f | wc -l) files"
