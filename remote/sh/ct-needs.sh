# In a container `remote create` made: what deploy needs (python3, git, CA certificates, bash's coreutils)
# installed from the template's own package manager where absent. Prints `missing ...` (before) and
# `installed-with TOOL` or `present`; exit 4 when no known package manager is there (the names it lacks).
# Usage: bash -c "$(cat ct-needs.sh)" ct-needs
set -euo pipefail
missing=()
command -v python3 > /dev/null 2>&1 || missing+=(python3)
command -v git > /dev/null 2>&1 || missing+=(git)
[ -s /etc/ssl/certs/ca-certificates.crt ] || [ -s /etc/pki/tls/certs/ca-bundle.crt ] || missing+=(ca-certificates)
if [ "${#missing[@]}" -eq 0 ]; then
  echo "present"
  exit 0
fi
echo "missing ${missing[*]}"
if command -v apt-get > /dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  # A container just started may not have its address yet (DHCP): the index read again for up to a minute.
  for try in 1 2 3 4 5 6 7 8 9 10 11 12; do
    apt-get update -qq && break
    [ "$try" -lt 12 ] || exit 1
    sleep 5
  done
  apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
  echo "installed-with apt-get"
elif command -v dnf > /dev/null 2>&1; then
  dnf install -y -q "${missing[@]}"
  echo "installed-with dnf"
elif command -v apk > /dev/null 2>&1; then
  apk add -q "${missing[@]}" bash
  echo "installed-with apk"
elif command -v pacman > /dev/null 2>&1; then
  pacman -Sy --noconfirm --needed "${missing[@]/python3/python}" > /dev/null
  echo "installed-with pacman"
else
  echo "error no package manager this script knows (apt-get, dnf, apk, pacman): install ${missing[*]} by hand" >&2
  exit 4
fi
