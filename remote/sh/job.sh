# The job's wrapper, leader of its own session: $1 run folder, $2 checkout, $3 command (bash), $4 restarts,
# $5 restart_on (exit statuses, space-separated; empty: any non-zero), $6 the watch (remote/sh/watch.py;
# empty: none), $7 its settings (JSON). Writes the pid file first and the exit record last (atomically),
# whatever the command does. Each attempt sees REMOTE_RESTART=<k> (0 the first time); `stop` is final.
run=$1 checkout=$2 command=$3 restarts=${4:-0} restart_on=${5:-} watch=${6:-} watch_conf=${7:-"{}"}
echo $$ > "$run/pid"
stopped=0
trap 'stopped=1; echo "[remote] got SIGTERM at $(date -Is)" >> "$run/log"' TERM
trap '' HUP
cd "$checkout" || { echo 126 > "$run/exit"; exit 126; }
watcher=
if [ -n "$watch" ] && py=$(command -v python3); then
  "$py" -I -S -c "$watch" "$run" "$REMOTE_RUN_ID" "$watch_conf" < /dev/null >> "$run/watch.log" 2>&1 &
  watcher=$!
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
k=0 rc=0
while :; do
  if [ "$k" -gt 0 ]; then
    echo "-- attempt $((k + 1)) of $((restarts + 1)) (previous exit $rc)" >> "$run/log"
  fi
  echo "start $((k + 1)) $(date +%s.%N)" >> "$run/attempts"
  REMOTE_RESTART=$k bash -c "$command" < /dev/null >> "$run/log" 2>&1 &
  child=$!
  is_stopped && kill -TERM "$child" 2>/dev/null
  while :; do
    wait "$child"; rc=$?
    kill -0 "$child" 2>/dev/null || break
  done
  echo "end $((k + 1)) $(date +%s.%N) $rc" >> "$run/attempts"
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
