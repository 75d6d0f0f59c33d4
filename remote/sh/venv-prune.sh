# Delete finished venv builds other than the kept ones. $1 the versions folder, $2.. full paths to keep.
# Never deleted: hand-made venvs (handmade-*), unfinished builds (no remote-venv.json: the cleanup's
# job), and any build a live process uses: runs from (exe, cwd, an open file), maps a library of
# (maps), names on its command line (a console script's shebang) or has activated (VIRTUAL_ENV).
# Prints "in use: <path>" for each one spared that way.
versions=$1; shift
pattern=$(mktemp)
trap 'rm -f -- "$pattern"' EXIT
in_use() {  # $1 a build folder
  local d=$1 glob
  # Through a pattern file, so that this scan's own command line never matches.
  printf '%s/\n' "$d" > "$pattern"
  grep -qsaF -f "$pattern" /proc/[0-9]*/maps /proc/[0-9]*/cmdline && return 0
  grep -qszxF -e "VIRTUAL_ENV=$d" /proc/[0-9]*/environ && return 0
  glob=$(printf '%s' "$d" | sed 's/[][*?\\]/\\&/g')
  [ -n "$(find /proc/[0-9]*/exe /proc/[0-9]*/cwd /proc/[0-9]*/fd -maxdepth 1 \
          \( -lname "$glob" -o -lname "$glob/*" \) -print -quit 2>/dev/null)" ]
}
cd "$versions" || exit
for d in */; do
  d=${d%/}
  full="$versions/$d"
  case $d in handmade-*) continue ;; esac
  [ -e "$full/remote-venv.json" ] || continue
  keep=0
  for k in "$@"; do [ "$k" = "$full" ] && keep=1; done
  [ $keep = 1 ] && continue
  if in_use "$full"; then
    echo "in use: $full"
    continue
  fi
  rm -rf -- "$full"
done
