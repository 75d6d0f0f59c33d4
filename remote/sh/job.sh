# The job's wrapper, leader of its own session: $1 run folder, $2 checkout, $3 command (bash).
# Writes the pid file first and the exit record last (atomically), whatever the command does.
run=$1 checkout=$2 command=$3
echo $$ > "$run/pid"
trap 'echo "[remote] got SIGTERM at $(date -Is)" >> "$run/log"' TERM
trap '' HUP
cd "$checkout" || { echo 126 > "$run/exit"; exit 126; }
bash -c "$command" < /dev/null >> "$run/log" 2>&1 &
child=$!
while :; do
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
echo "$rc" > "$run/exit.tmp" && mv "$run/exit.tmp" "$run/exit"
