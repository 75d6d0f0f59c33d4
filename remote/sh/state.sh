# The state of the latest run ($2 empty) or of run $2 under run_dir $1, as `key=value` lines, then the
# manifest and the last 32 KiB of the log after marker lines. First, `live=<id>:<pid> ...`: every live run
# (lib.sh's live_runs), the latest or not.
run_dir=$1 id=$2
echo "live=$(live_runs "$run_dir" | tr ' \n' ': ')"
[ -n "$id" ] || id=$(readlink "$run_dir/current" 2>/dev/null || true)
run=$run_dir/$id
if [ -z "$id" ] || [ ! -d "$run" ]; then
  echo "run="
  # A run asked for by id that is not there: the latest ids, for the message that says so.
  [ -z "$2" ] || echo "latest=$(find "$run_dir" -mindepth 1 -maxdepth 1 -type d -name '[!.]*' -printf '%f\n' 2>/dev/null | sort | tail -n 5 | tr '\n' ' ')"
  exit 0
fi
alive=0
run_alive "$run" "$id" && alive=1
echo "run=$id"
echo "path=$run"
echo "pid=$(cat "$run/pid" 2>/dev/null || true)"
echo "alive=$alive"
echo "exit=$(cat "$run/exit" 2>/dev/null || true)"
echo "stopped=$([ -e "$run/stop" ] && echo 1 || echo 0)"  # stop.sh's mark: ended by `remote stop`
echo "log_size=$(stat -c %s "$run/log" 2>/dev/null || echo 0)"
echo "now=$(date +%s)"
echo "marked=$(marked "$id" | tr '\n' ' ')"
# The watch's view (stalled, latest GPU rows) and the wrapper's attempts (job.sh, watch.py): one line each.
echo "watch=$(head -c 4096 "$run/watch.json" 2>/dev/null | tr -d '\n' || true)"
echo "attempts=$(tail -n 64 "$run/attempts" 2>/dev/null | tr '\n' ';' || true)"
echo "--manifest--"
cat "$run/manifest.json" 2>/dev/null || echo null
echo  # a manifest the job rewrote without a last newline would hide the marker (runs.sh does the same)
echo "--tail--"
tail -c 32768 "$run/log" 2>/dev/null || true
