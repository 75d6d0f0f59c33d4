# Who may change a program that a sudo rule names: run on the host where the rule is installed, as the login
# user (nothing here needs root, nothing here writes). Usage: bash -c "$(cat rootchain.sh)" rootchain PATH...
# For each PATH, every component from / down (and, where PATH resolves elsewhere through a symlink, every
# component of where it resolves to): `PATH<TAB>COMPONENT<TAB>UID MODE TYPE`, or `PATH<TAB>COMPONENT<TAB>missing`
# for the first component that does not exist (remote.sudo.unsafe reads it: a rule is only as safe as the
# folders above its programs).
set -u
walk() {
  local want=$1 path=$2 sofar="" part
  local -a parts
  printf '%s\t/\t%s\n' "$want" "$(stat -c '%u %a %F' -- /)"
  IFS=/ read -ra parts <<< "${path#/}"
  for part in "${parts[@]}"; do
    [ -n "$part" ] || continue
    sofar="$sofar/$part"
    if [ -e "$sofar" ] || [ -L "$sofar" ]; then
      printf '%s\t%s\t%s\n' "$want" "$sofar" "$(stat -c '%u %a %F' -- "$sofar")"
    else
      printf '%s\t%s\tmissing\n' "$want" "$sofar"
      return 0
    fi
  done
}
for path in "$@"; do
  walk "$path" "$path"
  real=$(readlink -m -- "$path")
  [ "$real" = "$path" ] || walk "$path" "$real"
done
