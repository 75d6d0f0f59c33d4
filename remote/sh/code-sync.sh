# Move the checkout to exactly one commit, from a bundle, saving what was edited there first.
# $1 checkout, $2 commit, $3 bundle file, $4 patches folder, $5 stamp, $6 record JSON, $7 the bundle's ref,
# $8 the shallow clone's boundary commits the bundle holds (space-separated; empty for a whole history).
# Prints "saved edits: <patch>" / "saved untracked files the commit replaces: <tar>"; exit 3 when the
# bundle does not hold the commit or the checkout is not clean afterwards.
path=$1 commit=$2 bundle=$3 patches=$4 stamp=$5 record=$6 ref=$7
mkdir -p "$path"
cd "$path" || exit
[ -d .git ] || { git init -q; echo "initialised a git repository in $path"; }
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
# Untracked files that the new commit would overwrite are saved first, then never touched otherwise.
collide=$(comm -z -12 <(git ls-files --others -z | LC_ALL=C sort -z) \
                      <(git ls-tree -r -z --name-only "$commit" | LC_ALL=C sort -z) | tr '\0' '\n')
if [ -n "$collide" ]; then
  mkdir -p "$patches"
  t="$patches/$stamp-untracked-overwritten.tar"
  printf '%s\n' "$collide" | tar -c -f "$t" -T -
  echo "saved untracked files the commit replaces: $t"
fi
git -c core.autocrlf=false checkout -q -f --detach "$commit"
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "checkout is not clean after reset" >&2; exit 3; }
printf '%s\n' "$record" > .git/remote-deploy.json
rm -f "$bundle"
