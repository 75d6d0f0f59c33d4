# One warmup: run $2 (bash) and report the compile cache folder $1 before and after, on stdout, as
# "REMOTE_CACHE before|after FILES BYTES" lines, and between them the compile watch's events of the command
# as "REMOTE_COMPILE LINE" lines (bounded). Exits with the command's status.
cache=$1 command=$2
stats() {
  find "$cache" -type f -printf '%s\n' 2>/dev/null | awk '{n++; b+=$1} END {printf "%d %d\n", n, b}'
}
mkdir -p "$cache"
echo "REMOTE_CACHE before $(stats)"
rc=0
bash -c "$command" </dev/null || rc=$?
# torch's counters of every process of the command (the venv's remote_cache_stats.pth writes them here)
if [ -n "${REMOTE_CACHE_STATS:-}" ] && [ -d "$REMOTE_CACHE_STATS" ]; then
  for f in "$REMOTE_CACHE_STATS"/*.json; do
    [ -f "$f" ] && echo "REMOTE_STATS $(head -c 4096 "$f")"
  done
  rm -rf -- "$REMOTE_CACHE_STATS"  # in the jobs' tmp/ folder: counters, not cache files
fi
# the compile watch's events of the command's processes (the venv's remote_compile_watch.pth writes them here)
if [ -n "${REMOTE_COMPILE_WATCH:-}" ] && [ -f "$REMOTE_COMPILE_WATCH" ]; then
  head -c 4194304 -- "$REMOTE_COMPILE_WATCH" | head -n 4000 | awk '{print "REMOTE_COMPILE " $0}'
  rm -f -- "$REMOTE_COMPILE_WATCH"  # in the jobs' tmp/ folder: events, not cache files
fi
echo "REMOTE_CACHE after $(stats)"
exit "$rc"
