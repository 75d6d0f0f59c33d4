# Receive a file on stdin into $1 (the partial file beside the destination), appending from byte $2
# (0: start over). Once stdin ends, prints the sha256 of the whole partial file as it is on disk.
# The destination is not touched here: commit_file.sh renames the partial into place after the
# controller compared the sums.
# $3: seconds without growth of the partial file after which a writer that holds its lock is stalled.
sha() { if command -v openssl >/dev/null; then openssl dgst -sha256 -r | cut -c1-64; else sha256sum | cut -c1-64; fi; }
part=$1 offset=$2 stall=${3:-30}
mkdir -p -- "$(dirname -- "$part")"
# One writer at a time. The writer of an attempt whose link went silent may hold the lock for ever,
# waiting for stdin that never comes (sshd thinks the session alive). Every writer carries a marker,
# REMOTE_PUSH_PARTIAL=<partial file>; once the partial has not grown for $stall s, the writers that
# carry this one's marker are ended, and this one takes over.
exec 9>>"$part"
if command -v flock >/dev/null; then
  size=$(stat -c %s -- "$part") still=0
  until flock -w 1 9; do
    now=$(stat -c %s -- "$part")
    if [ "$now" != "$size" ]; then size=$now still=0; else still=$((still + 1)); fi
    if [ "$still" -ge "$stall" ]; then
      stalled=$({ grep -l -a -z -x -F -e "REMOTE_PUSH_PARTIAL=$part" /proc/[0-9]*/environ 2>/dev/null || true; } |
                sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p' | { grep -vx -e "$$" || true; } | tr '\n' ' ')
      echo "the writer of an earlier attempt (pid $stalled) wrote nothing for ${stall}s: ended" >&2
      # shellcheck disable=SC2086  # a list of pids
      [ -z "$stalled" ] || kill -KILL $stalled 2>/dev/null || true
      still=0
    fi
  done
fi
export REMOTE_PUSH_PARTIAL=$part
if [ "$offset" = 0 ]; then
  cat > "$part"
else
  truncate -s "$offset" -- "$part"
  cat >> "$part"
fi
# Read back what landed (from the page cache), not the stream on its way in.
sha < "$part"
