# Print run $4's log ($1) from byte offset $2 (the run folder is $3). With $5 > 0, keep printing what is
# appended until the run ends (exit 0) or $5 seconds pass while it runs on (exit 124); with 0, print
# what is there and return. Exit 3 when there is no log. Bytes are counted exactly: nothing is printed
# twice or skipped, so the caller can resume at the offset it reached. With $6 (a byte offset), the run's
# compile.jsonl from there goes to stderr the same way (the compile watch's events, one JSON line each),
# and, once the run reported it, the first steady step's metrics.jsonl line as `{"steady": LINE}`.
log=$1 pos=$2 run=$3 id=$4 slice=$5 cpos=${6:-}
[ -e "$log" ] || { echo "no log at $log" >&2; exit 3; }
steady=
emit_compile() {
  local f=$run/compile.jsonl size
  [ -n "$cpos" ] || return 0
  # The second value (the first one's step includes the first compile), once its line is whole.
  if [ -z "$steady" ] && [ -s "$run/metrics.jsonl" ] && [ "$(head -n 2 "$run/metrics.jsonl" | wc -l)" -ge 2 ]; then
    steady=$(sed -n 2p "$run/metrics.jsonl")
    [ -z "$steady" ] || printf '{"steady": %s}\n' "$steady" >&2
  fi
  [ -e "$f" ] || return 0
  size=$(stat -c %s "$f")
  if [ "$size" -gt "$cpos" ]; then
    tail -c "+$((cpos + 1))" -- "$f" | head -c "$((size - cpos))" >&2
    cpos=$size
  fi
}
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
  emit_compile
  [ "$SECONDS" -lt "$end" ] || exit 124
  sleep 0.2
done
emit
emit_compile
