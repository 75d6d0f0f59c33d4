# Start a training job detached, under the launch lock: refuse while any run is live (unless forced),
# make the run folder, start the job as its own session (setsid) and point `current` at it.
# $1 run_dir, $2 run id, $3 force (0|1), $4 checkout, $5 command, $6 manifest JSON, $7 restarts,
# $8 restart_on, $9 the watch's settings (JSON); then the wrapper (remote/sh/job.sh) and the watch
# (remote/sh/watch.py; all three empty: none) as PATH SHA256 TEXT each: each is put at its PATH (named by
# its content, so a running wrapper's file is never rewritten) unless it is there with that sha256, and
# checked by sha256 before it runs, so `ps` shows `bash PATH RUN ...`, not the whole script. Then the
# checkpoint tool (remote/sh/ckpt.py) as PATH SHA256 TEXT, the command a restart resumes with and the
# checkpoint's settings (JSON): all four empty without train.checkpoint.
# The user's environment (train.env) was exported by withenv.sh before this runs; nothing here prints it.
run_dir=$1 id=$2 force=$3 checkout=$4 command=$5 manifest=$6 restarts=$7 restart_on=$8 watch_conf=$9
job=${10} job_sha=${11} job_text=${12} watch=${13} watch_sha=${14} watch_text=${15}
ckpt=${16:-} ckpt_sha=${17:-} ckpt_text=${18:-} command_resume=${19:-} ckpt_conf=${20:-}
# install PATH SHA256 TEXT: TEXT at PATH unless it is there already; exit 7 when PATH does not verify.
install() {
  local got tmp
  got=$(sha256sum < "$1" 2>/dev/null | cut -c1-64) || got=
  if [ "$got" != "$2" ]; then
    mkdir -p -- "$(dirname -- "$1")"
    tmp=$(mktemp -- "$1.remote-XXXXXX")
    printf '%s' "$3" > "$tmp" && chmod 644 -- "$tmp" && mv -f -- "$tmp" "$1"
    got=$(sha256sum < "$1" | cut -c1-64)
  fi
  [ "$got" = "$2" ] || { echo "$1 does not verify (sha256 $got, not $2)" >&2; exit 7; }
}
install "$job" "$job_sha" "$job_text"
[ -z "$watch" ] || install "$watch" "$watch_sha" "$watch_text"
[ -z "$ckpt" ] || install "$ckpt" "$ckpt_sha" "$ckpt_text"
mkdir -p "$run_dir"
exec 9>"$run_dir/.lock"
flock -w 10 9 || { echo "another train is starting on this container" >&2; exit 4; }
# Every live run counts, not only the latest (a forced one may run beside it; a late pid file).
if [ "$force" != 1 ] && live=$(live_runs "$run_dir") && [ -n "$live" ]; then
  runs=$(printf '%s\n' "$live" | sed -e 's/^\([^ ]*\) -$/run \1 (starting)/' \
                                 -e 's/^\([^ ]*\) \([0-9]*\)$/run \1 (pid \2)/' | paste -sd, - | sed 's/,/, /g')
  case $runs in *,*) echo "busy: $runs are still running" >&2 ;; *) echo "busy: $runs is still running" >&2 ;; esac
  exit 5
fi
run=$run_dir/$id
mkdir "$run"
printf '%s\n' "$manifest" > "$run/manifest.json"
printf '%s\n' "$command" > "$run/command"
printf '%s\n' "$watch_conf" > "$run/watch-settings.json"
if [ -n "$ckpt" ]; then
  printf '%s\n' "$command_resume" > "$run/command-resume"
  printf '%s\n' "$ckpt_conf" > "$run/checkpoint.json"
fi
: > "$run/log"
export REMOTE_RUN_ID=$id REMOTE_RUN_DIR=$run PET_LOG_DIR=$run/ranks REMOTE_CACHE_STATS=$run/cache-stats REMOTE_COMPILE_WATCH=$run/compile.jsonl
# The job must not hold the launch lock (9>&-).
setsid -f bash "$job" "$run" "$checkout" "$restarts" "$restart_on" "$watch" "$ckpt" < /dev/null > /dev/null 2>&1 9>&-
unset REMOTE_RUN_ID REMOTE_RUN_DIR PET_LOG_DIR REMOTE_CACHE_STATS REMOTE_COMPILE_WATCH  # this shell is not the job's
for _ in $(seq 100); do [ -s "$run/pid" ] && break; sleep 0.05; done
# A loaded container may start the wrapper late: while a process of the run lives, it started.
started() { live_runs "$run_dir" | awk -v id="$id" '$1 == id { f = 1 } END { exit !f }'; }
for _ in $(seq 250); do
  [ ! -s "$run/pid" ] && started || break
  sleep 0.1
done
if [ ! -s "$run/pid" ]; then
  started || { echo "the job did not start" >&2; exit 6; }
  ln -sfn "$id" "$run_dir/current.tmp" && mv -T "$run_dir/current.tmp" "$run_dir/current"
  echo "run $id started but its wrapper wrote no pid file within 30 s; it is live: \`remote status\` shows it," \
       "\`remote stop --run $id\` ends it" >&2
  exit 6
fi
ln -sfn "$id" "$run_dir/current.tmp" && mv -T "$run_dir/current.tmp" "$run_dir/current"
cat "$run/pid"
