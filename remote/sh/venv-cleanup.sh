# Stop the builders of interrupted venv builds, then delete what they left. $1 the versions folder,
# $2.. names in it: half-built venvs, their <name>.building staging folders, older *.partial leftovers.
# Only processes whose environment carries REMOTE_VENV_BUILD=<that build's folder> are signalled: a pid
# file is never trusted, since its pid may belong to an unrelated process by now.
versions=$1; shift
[ $# -gt 0 ] || exit 0
patterns=$(mktemp)
trap 'rm -f -- "$patterns"' EXIT
for name in "$@"; do
  base=${name%.building}
  base=${base%%.partial*}
  printf 'REMOTE_VENV_BUILD=%s/%s\nREMOTE_VENV_BUILD=%s/%s.partial\n' "$versions" "$base" "$versions" "$base"
done > "$patterns"
marked() {  # pids whose environment marks them as one of these builds (grep -z: NUL-separated entries)
  grep -lzxF -f "$patterns" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/||; s|/environ$||' || true
}
for _ in $(seq 50); do
  pids=$(marked)
  [ -n "$pids" ] || break
  echo "stopping builder process(es): $(echo "$pids" | tr '\n' ' ')"
  # shellcheck disable=SC2086  # a list of pids
  kill -KILL $pids 2>/dev/null || true
  sleep 0.1
done
cd "$versions" || exit
rm -rf -- "$@"
