# Stream a run's log from a byte offset: $1 log, $2 offset, $3 pid file, $4 seconds to follow (0: print
# what is there and return). Exit 3 when there is no log.
log=$1 offset=$2 pidfile=$3 slice=$4
[ -e "$log" ] || { echo "no log at $log" >&2; exit 3; }
pid=$(cat "$pidfile" 2>/dev/null || echo 0)
if [ "$slice" != 0 ] && [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null; then
  exec timeout "$slice" tail -c "+$((offset + 1))" -s 0.2 -f --pid="$pid" -- "$log"
fi
exec tail -c "+$((offset + 1))" -- "$log"
