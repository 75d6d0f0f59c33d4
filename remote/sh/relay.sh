# On a host: pipe one command's stdout into another's stdin, so that a copy between two containers of
# this host never leaves it. $1: how many of the words after it are the first command; the rest are the
# second. stdin goes to the first, the second's stdout and stderr come back; fails when either fails.
set -o pipefail
n=$1
shift
"${@:1:n}" | "${@:n+1}"
