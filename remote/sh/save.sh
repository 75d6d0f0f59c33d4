# stop --save, before stop.sh (appended to this script, same arguments): ask run $2 (folder $1) to save and
# wait for a new complete checkpoint, then fall through to the stop at once, in this same shell: the stop
# follows the save within one poll (0.2 s). $4 the checkpoint tool's text (remote/sh/ckpt.py), $5 its settings
# (JSON, with the grace it waits at most). Prints `saved=<JSON>` (ckpt.py wait's answer; empty where it
# failed: the stop goes on, as `stop` does).
# $6 `refuse` (save-or-refuse: gpu fix, move, drain, rollback): where no new complete checkpoint came (or the
# tool failed) and the job still runs, it is LEFT RUNNING: `kept=running` is printed and the script ends before
# the stop. The signal ckpt.py sent went only to processes with a handler for it (never a default action that
# kills), and the save request file is taken back, so asking changed nothing.
mode=${6:-}
rc=0
saved=$(python3 -I -S -c "$4" wait "$5" "$1" "$2" 2>/dev/null) || rc=$?
[ "$rc" -eq 0 ] || saved=
saved=$(printf '%s' "$saved" | tail -n 1)
echo "saved=$saved"
if [ "$mode" = refuse ] && [ -n "$(marked "$2")" ]; then
  case $saved in
    *'"why": "saved"'*) ;;
    *)
      rm -f -- "$1/save-requested"
      echo "kept=running"
      exit 0 ;;
  esac
fi
