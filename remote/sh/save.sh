# stop --save, before stop.sh (appended to this script, same arguments): ask run $2 (folder $1) to save and
# wait for a new complete checkpoint, then fall through to the stop at once, in this same shell: the stop
# follows the save within one poll (0.2 s). $4 the checkpoint tool's text (remote/sh/ckpt.py), $5 its settings
# (JSON, with the grace it waits at most). Prints `saved=<JSON>` (ckpt.py wait's answer; empty where it
# failed: the stop goes on, as `stop` does).
saved=$(python3 -I -S -c "$4" wait "$5" "$1" "$2" 2>/dev/null) || saved=
echo "saved=$(printf '%s' "$saved" | tail -n 1)"
