# stop --save, after stop.sh (appended to it; the same arguments as save.sh): the job is stopped, verified. Where
# the stop cut an in-place save short (the checkpoint torn after the one save.sh saw), the kept copy goes back
# in its place now (ckpt.py restore: the torn file renamed aside, never deleted), so what stop --save names is
# what the path holds. Prints `restored=<JSON>` (ckpt.py restore's answer; empty where nothing was asked).
if [ -n "$saved" ] && [ -z "$(marked "$2")" ]; then
  restored=$(python3 -I -S -c "$4" restore "$5" 2>/dev/null | tail -n 1) || true
  echo "restored=$restored"
fi
