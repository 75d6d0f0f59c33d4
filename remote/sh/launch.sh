# Start a training job detached, under the launch lock: refuse while the current run is alive (unless
# forced), make the run folder, start the job as its own session (setsid) and point `current` at it.
# $1 run_dir, $2 run id, $3 force (0|1), $4 checkout, $5 command, $6 manifest JSON, $7 the job wrapper.
# The user's environment (train.env) was exported by withenv.sh before this runs; nothing here prints it.
run_dir=$1 id=$2 force=$3 checkout=$4 command=$5 manifest=$6 job=$7
mkdir -p "$run_dir"
exec 9>"$run_dir/.lock"
flock -w 10 9 || { echo "another train is starting on this container" >&2; exit 4; }
if [ "$force" != 1 ] && cur=$(readlink "$run_dir/current" 2>/dev/null) && run_alive "$run_dir/$cur" "$cur"; then
  echo "busy: run $cur (pid $(cat "$run_dir/$cur/pid")) is still running" >&2
  exit 5
fi
run=$run_dir/$id
mkdir "$run"
printf '%s\n' "$manifest" > "$run/manifest.json"
: > "$run/log"
export REMOTE_RUN_ID=$id PET_LOG_DIR=$run/ranks
# The job must not hold the launch lock (9>&-).
setsid -f bash -c "$job" job "$run" "$checkout" "$command" < /dev/null > /dev/null 2>&1 9>&-
for _ in $(seq 100); do [ -s "$run/pid" ] && break; sleep 0.05; done
[ -s "$run/pid" ] || { echo "the job did not start" >&2; exit 6; }
ln -sfn "$id" "$run_dir/current.tmp" && mv -T "$run_dir/current.tmp" "$run_dir/current"
cat "$run/pid"
