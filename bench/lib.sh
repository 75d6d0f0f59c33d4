# shellcheck shell=bash
# shellcheck disable=SC2154  # work, logs, budget and lab are the sourcing script's
# What the GPU benchmarks (bench/gpu_*.sh) share, sourced after each has set work=, logs=, budget= (and started=
# where its budget counts from a point of its own) and, for the lab's pct, lab=:
#   remote ARGS...      the command line of this tree (no install needed)
#   fact KEY VALUE      one line of $work/facts.tsv, which the script's record reads
#   stamp               each line of stdin prefixed with the time it came ($EPOCHREALTIME)
#   pct ARGS...         the lab's pct double
#   step NAME CMD...    run CMD into $logs/NAME.log, timed; its line in $work/steps.tsv (NAME RC SECONDS, and
#                       with step_stamped=1 the start time too, each log line stamped); one line on stdout; skipped
#                       (RC "skipped") past the time budget. step_width and step_cut shape the stdout line only.

remote() { python3 -c 'from remote.cli import program; program.run()' "$@"; }
fact() { printf '%s\t%s\n' "$1" "$2" >> "$work/facts.tsv"; }
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
pct() { "$lab/bin/pct" "$@"; }

step_stamped=${step_stamped:-0}
step_width=${step_width:-18}
step_cut=${step_cut:-150}

step() {  # step NAME CMD...: run, time, log; one line on stdout; its status in the record
  local name=$1; shift
  local t0 t1 rc secs last
  if [ "$budget" -gt 0 ] && [ $((SECONDS - ${started:-0})) -gt "$budget" ]; then
    if [ "$step_stamped" = 1 ]; then
      printf '%s\t%s\t%s\t%s\n' "$name" skipped 0 "$EPOCHREALTIME" >> "$work/steps.tsv"
    else
      printf '%s\t%s\t%s\n' "$name" skipped 0 >> "$work/steps.tsv"
    fi
    echo "== $name: skipped (past the time budget of ${budget}s)"
    return 1
  fi
  t0=$EPOCHREALTIME
  if [ "$step_stamped" = 1 ]; then
    "$@" 2>&1 | stamp > "$logs/$name.log"
    rc=${PIPESTATUS[0]}
  else
    "$@" > "$logs/$name.log" 2>&1
    rc=$?
  fi
  t1=$EPOCHREALTIME
  secs=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")
  if [ "$step_stamped" = 1 ]; then
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$secs" "$t0" >> "$work/steps.tsv"
    last=$(tail -n 1 "$logs/$name.log" | cut -d' ' -f2-)
  else
    printf '%s\t%s\t%s\n' "$name" "$rc" "$secs" >> "$work/steps.tsv"
    last=$(tail -n 1 "$logs/$name.log")
  fi
  printf "== %-${step_width}s rc=%-3s %7ss  %s\n" "$name" "$rc" "$secs" "$(printf '%s' "$last" | cut -c1-"$step_cut")"
  return "$rc"
}
