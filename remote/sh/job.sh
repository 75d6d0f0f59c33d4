# The job's wrapper, leader of its own session, started from its file in the container (launch.sh puts it
# there, verified by sha256), so `ps` shows `bash .../job-<sha>.sh RUN ...`: $1 run folder, $2 checkout,
# $3 restarts, $4 restart_on (exit statuses, space-separated; empty: any non-zero), $5 the watch's file
# (remote/sh/watch.py; empty: none), $6 the checkpoint tool's file (remote/sh/ckpt.py; empty: no checkpoint
# configured). With a checkpoint, an attempt after the first restores the latest complete one and runs
# $run/command-resume (its {checkpoint} replaced) where one exists, else the plain command. The command (bash) is in $run/command, the watch's settings in
# $run/watch-settings.json. Writes the pid file first and the exit record last (atomically), whatever the
# command does. Each attempt sees REMOTE_RESTART=<k> (0 the first time) and is recorded with the commit the
# checkout has then (a `deploy --force` may have moved it); `stop` is final.
run=$1 checkout=$2 restarts=${3:-0} restart_on=${4:-} watch=${5:-} ckpt=${6:-}
echo $$ > "$run/pid"
stopped=0
trap 'stopped=1; echo "[remote] got SIGTERM at $(date -Is)" >> "$run/log"' TERM
trap '' HUP
cd "$checkout" || { echo 126 > "$run/exit"; exit 126; }
watcher=
py=$(command -v python3) || py=
if [ -n "$watch" ] && [ -n "$py" ]; then
  "$py" -I -S "$watch" "$run" "$REMOTE_RUN_ID" "$run/watch-settings.json" < /dev/null >> "$run/watch.log" 2>&1 &
  watcher=$!
  echo "$watcher" > "$run/watch.pid"  # stop --save signals the job's processes, never the watch
fi
# stop.sh leaves $run/stop before it signals: no attempt starts once it is there.
is_stopped() { [ "$stopped" = 1 ] || [ -e "$run/stop" ]; }
restartable() {
  [ "$1" != 0 ] || return 1
  [ -n "$restart_on" ] || return 0
  local code
  for code in $restart_on; do [ "$code" = "$1" ] && return 0; done
  return 1
}
# The container's count of OOM kills (cgroup v2 memory.events, v1 memory.oom_control; empty where unreadable):
# an attempt that ends by SIGKILL while it rose was killed by the kernel at the container's memory limit.
oom_kills() {
  cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null |
    awk '$1 == "oom_kill" && $2 ~ /^[0-9]+$/ { print $2; exit }'
}
k=0 rc=0
while :; do
  if [ "$k" -gt 0 ]; then
    echo "-- attempt $((k + 1)) of $((restarts + 1)) (previous exit $rc)" >> "$run/log"
  fi
  head=$(git -C "$checkout" rev-parse -q --verify HEAD 2>/dev/null) || head=-
  if [ "$k" = 0 ]; then
    first=$head
  elif [ "$head" != "$first" ]; then
    echo "-- attempt $((k + 1)) runs commit $head, not $first, which the run started with (the checkout moved:" \
         "a \`deploy --force\` under the run?); the manifest's attempts record each one's commit" >> "$run/log"
  fi
  cmdfile=$run/command
  if [ "$k" -gt 0 ] && [ -n "$ckpt" ] && [ -e "$run/checkpoint.json" ]; then
    said=$("$py" -I -S "$ckpt" resume "$(cat "$run/checkpoint.json")" "$run" 2>> "$run/watch.log") && got=0 || got=$?
    if [ "$got" = 0 ]; then
      cmdfile=$run/command-next
      echo "-- attempt $((k + 1)) of $((restarts + 1)) resumes from $said" >> "$run/log"
      echo "resume $((k + 1)) $said" >> "$run/attempts"
    elif [ "$got" = 3 ]; then  # no complete checkpoint: nothing a new start could overwrite
      echo "-- attempt $((k + 1)) of $((restarts + 1)) starts over: $said" >> "$run/log"
    else
      # The tool failed (watch.log says why): a start over would save over checkpoints it could not read.
      echo "-- no attempt $((k + 1)): the checkpoint tool failed (exit $got, see watch.log); not started over," \
           "which could overwrite the checkpoints: \`remote train --resume\` resumes the run" >> "$run/log"
      break
    fi
  fi
  ooms=$(oom_kills)
  echo "start $((k + 1)) $(date +%s.%N) $head" >> "$run/attempts"
  REMOTE_RESTART=$k bash -c "$(cat "$cmdfile")" < /dev/null >> "$run/log" 2>&1 &
  child=$!
  is_stopped && kill -TERM "$child" 2>/dev/null
  while :; do
    wait "$child"; rc=$?
    kill -0 "$child" 2>/dev/null || break
  done
  echo "end $((k + 1)) $(date +%s.%N) $rc" >> "$run/attempts"
  if [ "$rc" = 137 ] && [ -n "$ooms" ] && [ "$(oom_kills)" -gt "$ooms" ] 2>/dev/null; then
    echo "killed $((k + 1)) oom" >> "$run/attempts"
    echo "-- attempt $((k + 1)) was killed by the kernel's OOM killer (exit 137): the container reached its" \
         "memory limit" >> "$run/log"
  fi
  stall=
  if [ -e "$run/stall-end" ]; then stall=$(cat "$run/stall-end"); rm -f "$run/stall-end"; fi
  is_stopped && break
  if [ "$stall" = stop ] || { [ "$stall" = restart ] && [ "$k" -ge "$restarts" ]; }; then
    rc=124  # ended by the stall watch (watch.json says when and where its stacks are)
    break
  fi
  [ "$stall" = restart ] || { [ "$k" -lt "$restarts" ] && restartable "$rc"; } || break
  k=$((k + 1))
  # The backoff: 1, 2, 4 ... 30 s; TERM (stop) ends it at once and nothing more starts.
  sleep "$(( k > 5 ? 30 : 1 << (k - 1) ))" &
  wait $! 2>/dev/null
  is_stopped && { echo "[remote] stopped during the backoff: no attempt $((k + 1))" >> "$run/log"; break; }
done
if [ -n "$watcher" ]; then
  kill -TERM "$watcher" 2>/dev/null
  wait "$watcher"
fi
echo "$rc" > "$run/exit.tmp" && mv "$run/exit.tmp" "$run/exit"
