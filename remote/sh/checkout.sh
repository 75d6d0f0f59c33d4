# The checkout $1: its HEAD commit, then `git status --porcelain` lines of tracked files with edits.
cd "$1" || exit
git rev-parse HEAD
git status --porcelain --untracked-files=no
