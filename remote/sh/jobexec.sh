# `remote exec` in one container command: once deployed, "$@" runs in the checkout with the job's
# environment, else plainly from /root. Whether it is deployed, and the per-version compile cache folder,
# are read here, from what deploy wrote (remote/ops/jobenv.py run_as_deployed), not asked first.
# $1 the venv, $2 the checkout, $3 1 where deploy ships the checkout (code.repo) else 0, $4 the mark that
# the job's variables carry in place of the per-version cache folder's name; then the command.
# The job's variables arrive in the environment, their names in REMOTE_JOB_VARS; train.env on stdin as
# NUL-separated NAME=VALUE pairs (withenv.sh), never in an argv.
venv=$1 checkout=$2 shipped=$3 mark=$4
shift 4
names=${REMOTE_JOB_VARS:-}
unset REMOTE_JOB_VARS
deployed=0
if [ -f "$venv/remote-venv.json" ]; then
  if [ "$shipped" = 1 ]; then
    [ -f "$checkout/.git/remote-deploy.json" ] && deployed=1
  else
    [ -d "$checkout" ] && deployed=1
  fi
fi
if [ "$deployed" != 1 ]; then
  # Not deployed (or not yet): the command as `pct exec` would run it. env names a missing program as
  # remote's error classification expects, in the C locale's quotes; the command itself gets no LC_ALL.
  for name in $names; do unset "$name"; done
  cd /root 2>/dev/null || cd /
  exec env LC_ALL=C env -u LC_ALL -- "$@" </dev/null
fi
folder=
if [ -f "$venv/remote-cache-folder" ]; then
  IFS= read -r folder < "$venv/remote-cache-folder" || true
fi
if [ -z "$folder" ]; then
  # A venv built before deploy wrote remote-cache-folder: the same name from its record, as
  # remote.naming.compile_cache makes it.
  folder=$("$venv/bin/python" -I -S -c '
import json, re, sys
v = (json.load(open(sys.argv[1])).get("verify") or {})
name = "torch-%s-cuda-%s-triton-%s" % (v.get("torch") or "none", v.get("cuda_build") or "none", v.get("triton") or "none")
print(re.sub(r"[^A-Za-z0-9.+_-]", "_", name))' "$venv/remote-venv.json") || folder=
fi
if ! [[ $folder =~ ^[A-Za-z0-9.+_-]+$ ]] || [ "$folder" = . ] || [ "$folder" = .. ]; then
  echo "remote: cannot tell the compile cache folder from $venv (remote-cache-folder, remote-venv.json): run \`remote deploy\`" >&2
  exit 125
fi
for name in $names; do
  value=${!name}
  export "$name=${value//"$mark"/$folder}"
done
cd -- "$checkout" || exit 125
while IFS= read -r -d '' pair; do
  export "${pair?}"
done
# tempfile.gettempdir() ignores a TMPDIR that does not exist and falls back to /tmp.
[ -z "${TMPDIR:-}" ] || mkdir -p -- "$TMPDIR"
exec "$@" </dev/null
