# The runs under run_dir $1, the latest $2 of them (oldest first; run ids start with their start time).
# Per run: the marker line $3, then what state.sh prints for one run (key=value lines, the manifest and
# the last $4 bytes of the log after marker lines). What the folders hold is the container's: pid and
# exit are reduced to digits, so a file cannot add lines of its own.
run_dir=$1 limit=$2 marker=$3 tail_bytes=$4
[ -d "$run_dir" ] || exit 0
ids=()
for d in "$run_dir"/*/; do
  d=${d%/}
  [ ! -L "$d" ] || continue  # `current` (a link to the latest) is no run of its own
  [ -e "$d/manifest.json" ] || [ -e "$d/pid" ] || continue  # a run's folder
  ids+=("${d##*/}")
done
n=${#ids[@]}
start=$(( n > limit ? n - limit : 0 ))
now=$(date +%s)
live=$(live_runs "$run_dir" | tr ' \n' ': ')  # runs with a process of theirs, pid file or not (lib.sh)
for id in "${ids[@]:start}"; do
  run=$run_dir/$id
  alive=0
  run_alive "$run" "$id" && alive=1
  echo "$marker"
  echo "live=$live"
  echo "run=$id"
  echo "path=$run"
  echo "pid=$(head -c 32 "$run/pid" 2>/dev/null | tr -dc 0-9 || true)"
  echo "alive=$alive"
  echo "exit=$(head -c 32 "$run/exit" 2>/dev/null | tr -dc '0-9-' || true)"
  echo "stopped=$([ -e "$run/stop" ] && echo 1 || echo 0)"  # stop.sh's mark: ended by `remote stop`
  echo "log_size=$(stat -c %s "$run/log" 2>/dev/null || echo 0)"
  echo "now=$now"
  echo "--manifest--"
  cat "$run/manifest.json" 2>/dev/null || echo null
  echo  # a manifest without a last newline would hide the marker
  echo "--tail--"
  tail -c "$tail_bytes" "$run/log" 2>/dev/null || true
done
