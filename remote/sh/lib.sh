# Functions shared by the job scripts (prepended to each). The one liveness rule: a run is alive while it
# has no exit record and its leader (the pid in its pid file) is a live, non-zombie process that carries
# the run's marker, REMOTE_RUN_ID=<id>, in its environment. A pid alone proves nothing: pids are reused,
# and a zombie answers `kill -0` when the container's init does not reap.

# ours PID ID: PID is alive, not a zombie, and carries REMOTE_RUN_ID=ID.
ours() {
  local stat
  [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ] || return 1
  { tr '\0' '\n' < "/proc/$1/environ"; } 2>/dev/null | grep -qx "REMOTE_RUN_ID=$2"
}

# marked ID: the pids of every live process that carries the run's marker (this shell excluded).
marked() {
  local e p
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    ours "$p" "$1" && echo "$p"
  done
  return 0  # processes come and go during the scan
}

# run_alive RUN_FOLDER ID
run_alive() {
  [ ! -e "$1/exit" ] && ours "$(cat "$1/pid" 2>/dev/null)" "$2"
}

# live_runs RUN_DIR: "<id> <pid>" (pid "-" while its pid file is not written yet) for every run in RUN_DIR
# that is live: no exit record, and a live process that carries its marker (its leader or any other: the
# wrapper may not have written its pid file yet, or may be gone while its processes run on). Not only the
# latest run: `train --force` starts a second one beside it. One read of every process's environment.
live_runs() {
  local id
  { grep -a -z -o -h '^REMOTE_RUN_ID=.*' /proc/[0-9]*/environ 2>/dev/null || true; } | tr '\0' '\n' |
    sed -n 's/^REMOTE_RUN_ID=//p' | LC_ALL=C sort -u |
    while IFS= read -r id; do
      case $id in ''|.|..|*/*) continue ;; esac
      [ -d "$1/$id" ] && [ ! -e "$1/$id/exit" ] || continue
      echo "$id $(cat "$1/$id/pid" 2>/dev/null || echo -)"
    done
}
