# Build a venv directly at its final folder (so every console script's shebang and bin/activate name
# the path it is used from): $1 uv, $2 python, $3 the venv folder, $4 its staging folder (spec.in,
# guard.py, compilewatch.py, checkpoint.py, ckpt.py, lock.txt when the deploy resolved the lock already),
# then uv's index arguments. Runs with
# REMOTE_VENV_BUILD=<venv folder> in the environment, which is how a later deploy recognises this
# builder. The venv counts as finished only once deploy has verified it and written its
# remote-venv.json; until then nothing uses it.
uv=$1 python=$2 venv=$3 staging=$4; shift 4
echo $$ > "$staging/pid"
"$uv" venv --quiet --python "$python" --no-project "$venv"
cp "$staging/spec.in" "$venv/remote-spec.in"
if [ -f "$staging/lock.txt" ]; then
  # A deploy of several containers resolved the lock once: every container installs exactly that.
  echo "using the lock this deploy resolved once for all its containers"
  cp "$staging/lock.txt" "$venv/remote-lock.txt"
else
  echo "resolving (uv pip compile)..."
  # No annotations: a `# via -r <this build folder>/remote-spec.in` line would make every build's lock differ.
  "$uv" pip compile --quiet --python "$venv/bin/python" --generate-hashes --no-header --no-annotate "$@" \
      -o "$venv/remote-lock.txt" "$venv/remote-spec.in"
fi
echo "installing $(grep -c '==' "$venv/remote-lock.txt") packages (uv pip sync)..."
"$uv" pip sync --python "$venv/bin/python" "$@" "$venv/remote-lock.txt"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp "$staging/guard.py" "$site/remote_guard.py"
# Every process of the venv where REMOTE_CACHE_STATS is set leaves its compile-cache counters there at exit
# (a train run sets it): nothing is imported where it is not set.
echo 'import os; os.environ.get("REMOTE_CACHE_STATS") and __import__("remote_guard").stats_at_exit()' \
  > "$site/remote_cache_stats.pth"
# The compile watch: where REMOTE_COMPILE_WATCH is set (a train run sets it to <run>/compile.jsonl), every
# compile, recompile, graph break and eager fallback of the process is written there as it happens.
cp "$staging/compilewatch.py" "$site/remote_compilewatch.py"
echo 'import os; os.environ.get("REMOTE_COMPILE_WATCH") and __import__("remote_compilewatch").install()' \
  > "$site/remote_compile_watch.pth"
# The optional checkpoint helper a job may import (remote_checkpoint), with the checkpoint rules it uses
# (remote/sh/ckpt.py as remote_ckpt): nothing imports either unless the job's code does.
cp "$staging/checkpoint.py" "$site/remote_checkpoint.py"
cp "$staging/ckpt.py" "$site/remote_ckpt.py"
