# Print run $4's log ($1) from byte offset $2 (the run folder is $3). With $5 > 0, keep printing what is
# appended until the run ends (exit 0) or $5 seconds pass while it runs on (exit 124); with 0, print
# what is there and return. Exit 3 when there is no log. Bytes are counted exactly: nothing is printed
# twice or skipped, so the caller can resume at the offset it reached.
log=$1 pos=$2 run=$3 id=$4 slice=$5
[ -e "$log" ] || { echo "no log at $log" >&2; exit 3; }
emit() {
  local size
  size=$(stat -c %s "$log")
  if [ "$size" -gt "$pos" ]; then
    tail -c "+$((pos + 1))" -- "$log" | head -c "$((size - pos))"
    pos=$size
  fi
}
end=$((SECONDS + slice))
while [ "$slice" != 0 ] && run_alive "$run" "$id"; do
  emit
  [ "$SECONDS" -lt "$end" ] || exit 124
  sleep 0.2
done
emit
