# remote shell: an interactive bash in the container with the job's environment.
#   shell.sh save            train.env's NAME=VALUE pairs (NUL-separated, on stdin) into a file only root
#                            reads; prints its path. The values never appear in an argv.
#   shell.sh start FILE DIR  export FILE's pairs and delete it, cd to DIR, then an interactive bash
#                            (not a login shell: /etc/profile would reset PATH and drop the venv).
case $1 in
  save)
    umask 077
    # Files of shells that never started (a lost connection) go after a while.
    find /root -maxdepth 1 -name '.remote-shell-env.*' -mmin +10 -delete 2>/dev/null || true
    f=$(mktemp /root/.remote-shell-env.XXXXXX)
    cat > "$f"
    echo "$f"
    ;;
  start)
    if [ -n "$2" ] && [ -f "$2" ]; then
      while IFS= read -r -d '' pair; do
        export "${pair?}"
      done < "$2"
      rm -f -- "$2"
    fi
    [ -z "${TMPDIR:-}" ] || mkdir -p -- "$TMPDIR"
    if ! cd -- "$3" 2>/dev/null; then
      echo "remote shell: no checkout at $3 yet (remote deploy makes it); starting in $HOME" >&2
      cd || exit 1
    fi
    exec bash -i
    ;;
  *)
    echo "shell.sh: unknown mode ${1-}" >&2
    exit 2
    ;;
esac
