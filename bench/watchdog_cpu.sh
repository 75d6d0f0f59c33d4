# The CPU ticks (utime + stime) of run $1's watch (remote/sh/watch.py and its nvidia-smi) and of the rest of
# its processes, read from /proc; then CLK_TCK and the time: "WATCH JOB TICK EPOCH".
run_id=$1
tick=$(getconf CLK_TCK)
w=0 j=0
for e in /proc/[0-9]*/environ; do
  p=${e#/proc/}; p=${p%/environ}
  tr '\0' '\n' < "$e" 2>/dev/null | grep -qx "REMOTE_RUN_ID=$run_id" || continue
  s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
  read -r -a f <<< "${s##*) }"
  cmd=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null)
  case $cmd in
    *" -I -S -c "*|*nvidia-smi*) w=$((w + f[11] + f[12])) ;;
    *) j=$((j + f[11] + f[12])) ;;
  esac
done
echo "$w $j $tick $(date +%s.%N)"
