# Run "$@" with the user's environment variables (train.env) read from stdin as NUL-separated NAME=VALUE
# pairs: their values, which may be secrets, never appear in an argv (ps on the host or in the container).
# The command itself gets /dev/null as stdin.
while IFS= read -r -d '' pair; do
  export "${pair?}"
done
# tempfile.gettempdir() ignores a TMPDIR that does not exist and falls back to /tmp.
[ -z "${TMPDIR:-}" ] || mkdir -p -- "$TMPDIR"
exec "$@" </dev/null
