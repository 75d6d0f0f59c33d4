# The per-container operation lease of remote/ops/oplock.py, read and written under flock.
# $1 action (acquire | renew | release), $2 lease file, $3 our token, $4 seconds the lease lasts,
# $5 holder, $6 command, $7 start time (the last three only for acquire).
# The lease file holds key=value lines: token, expires (the container's epoch seconds), holder,
# command, started. Times are the container's own clock, so the controllers' clocks never matter.
# Exit 0: done; acquire prints "took-over" and the old lease when it replaced an expired one.
# Exit 3: someone else holds a live lease (acquire); it is printed with now=<epoch> first.
# Exit 4: the lease is no longer ours (renew), printed. Exit 5: the flock timed out.
action=$1 lease=$2 token=$3 ttl=$4 holder=${5:-} command=${6:-} started=${7:-}
mkdir -p -- "$(dirname -- "$lease")"
exec 9>>"$lease.flock"
flock -w 20 9 || { echo "cannot lock $lease.flock" >&2; exit 5; }
now=$(date +%s)
field() { [ -e "$lease" ] || return 0; sed -n "s/^$1=//p" "$lease" | head -n 1; }
cur_token=$(field token)
cur_expires=$(field expires)
[[ $cur_expires =~ ^[0-9]+$ ]] || cur_expires=0
write() {  # $1 holder, $2 command, $3 started
  local tmp="$lease.tmp.$$"
  printf 'token=%s\nexpires=%s\nholder=%s\ncommand=%s\nstarted=%s\n' \
    "$token" "$((now + ttl))" "$1" "$2" "$3" > "$tmp"
  mv -f -- "$tmp" "$lease"
}
case $action in
  acquire)
    if [ -n "$cur_token" ] && [ "$cur_token" != "$token" ]; then
      if [ "$cur_expires" -gt "$now" ]; then
        echo "now=$now"
        cat -- "$lease"
        exit 3
      fi
      echo took-over
      cat -- "$lease"
    fi
    write "$holder" "$command" "$started"
    ;;
  renew)
    # Still ours even past its expiry, as long as nobody took it over.
    if [ "$cur_token" != "$token" ]; then
      echo "now=$now"
      cat -- "$lease" 2>/dev/null || true
      exit 4
    fi
    write "$(field holder)" "$(field command)" "$(field started)"
    ;;
  release)
    if [ "$cur_token" = "$token" ]; then rm -f -- "$lease"; fi
    ;;
  *)
    echo "unknown action $action" >&2
    exit 2
    ;;
esac
