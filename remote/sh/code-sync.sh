# Move the checkout to exactly one commit, from a bundle, saving what was edited there first.
# $1 checkout, $2 commit, $3 bundle file, $4 patches folder, $5 stamp, $6 record JSON, $7 the bundle's ref,
# $8 the shallow clone's boundary commits the bundle holds (space-separated; empty for a whole history).
# Prints "removed stale lock: <file>" for a git lock an interrupted deploy left,
# "saved edits: <patch>" / "saved untracked files the commit replaces: <tar>" followed by one
# "replaced untracked: <path>" line per path; exit 3 when the bundle does not hold the commit, the untracked
# paths it replaces cannot be saved, or the checkout is not clean afterwards.
path=$1 commit=$2 bundle=$3 patches=$4 stamp=$5 record=$6 ref=$7
mkdir -p "$path"
cd "$path" || exit
[ -d .git ] || { git init -q; echo "initialised a git repository in $path"; }
# A git ended mid-write (an interrupted deploy: Ctrl-C or a lost link ends the step in flight) leaves its
# lock files, and every later checkout here fails on them. This runs under the operation lease, so no
# deploy writes here now: a lock that no process holds open is such a leftover, removed and named; one a
# live process (a git run by hand) holds is left, and git says so below.
for lock in index.lock HEAD.lock; do
  lock=$(pwd -P)/$(git rev-parse --git-path "$lock")
  [ -e "$lock" ] || continue
  held=0
  for fd in /proc/[0-9]*/fd/*; do
    [ "$(readlink "$fd" 2>/dev/null)" = "$lock" ] && { held=1; break; }
  done
  [ "$held" = 1 ] || { rm -f -- "$lock"; echo "removed stale lock: $lock (no process holds it: left by an interrupted git)"; }
done
# From a shallow clone: the checkout is shallow at the same commits (those it lacks), or the fetch fails.
for s in ${8-}; do
  git cat-file -e "$s^{commit}" 2>/dev/null || printf '%s\n' "$s" >> "$(git rev-parse --git-path shallow)"
done
git -c core.autocrlf=false fetch -q "$bundle" "$ref"
[ "$(git rev-parse FETCH_HEAD)" = "$commit" ] || { echo "bundle does not hold $commit" >&2; exit 3; }
old=$(git rev-parse -q --verify HEAD || true)
if [ -n "$old" ]; then
  git update-ref "refs/remote-deploy/before-$stamp" "$old"
  if ! git diff --quiet HEAD -- || ! git diff --cached --quiet HEAD --; then
    mkdir -p "$patches"
    p="$patches/$stamp-${old:0:12}.patch"
    git diff --binary HEAD -- > "$p"
    echo "saved edits: $p"
  fi
fi
# Untracked (and ignored) paths that the checkout would replace or remove are saved first, then never
# touched otherwise: a path the commit tracks too; an untracked file or symlink where the commit needs a
# folder (`results` where it tracks results/summary.md); every untracked file inside a folder where the
# commit puts a file or symlink (`data/` where it tracks `data`), at any depth. Each is named by the path
# the commit claims (the folder, with how many files it held). When they cannot all be saved (a full disk)
# the checkout does not move.
names=$(mktemp)
endangered=$(mktemp)
trap 'rm -f "$names" "$endangered"' EXIT
{ git ls-tree -r -t -z "$commit" | awk 'BEGIN { RS = "\0"; ORS = "\0" }
    { i = index($0, "\t"); split(substr($0, 1, i - 1), f, " ")
      print (f[2] == "blob" ? "F" : "D") substr($0, i + 1) }'
  git ls-files --others -z | awk 'BEGIN { RS = "\0"; ORS = "\0" } { print "U" $0 }'
} | awk -v names="$names" 'BEGIN { RS = "\0"; ORS = "\0" }
    /^F/ { file[substr($0, 2)] = 1; next }
    /^D/ { dir[substr($0, 2)] = 1; next }
    { p = substr($0, 2); q = p; sub(/\/$/, "", q)  # a nested repository is listed as one folder, "x/"
      key = ""
      if (q in file) key = q
      else if (q in dir) key = q
      else {  # the shallowest folder of p that the commit makes a file or symlink
        a = q
        while ((j = match(a, /\/[^\/]*$/)) > 0) { a = substr(a, 1, j - 1); if (a in file) key = a "/" }
      }
      if (key == "") next
      print p
      if (!(key in count)) order[++n] = key
      count[key]++ }
    END { for (i = 1; i <= n; i++) {
            k = order[i]; gsub(/[\n\t]/, "?", k)
            printf "%s%s\n", k, (k ~ /\/$/ ? " (" count[order[i]] " file" (count[order[i]] > 1 ? "s" : "") ")" : "") > names } }' \
  > "$endangered"
if [ -s "$endangered" ]; then
  mkdir -p "$patches"
  t="$patches/$stamp-untracked-overwritten.tar"
  if ! tar -c -f "$t" --null -T "$endangered"; then
    rm -f "$t" 2>/dev/null || true
    echo "could not save the untracked paths the commit replaces (to $t), so the checkout did not move;" \
         "move them out of $path and deploy again:" >&2
    sed 's/^/  /' "$names" >&2
    exit 3
  fi
  echo "saved untracked files the commit replaces: $t"
  sed 's/^/replaced untracked: /' "$names"
fi
git -c core.autocrlf=false checkout -q -f --detach "$commit"
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "checkout is not clean after reset" >&2; exit 3; }
printf '%s\n' "$record" > .git/remote-deploy.json
rm -f "$bundle"
