# Who may change a program that a sudo rule names: run on the host where the rule is installed, as the login
# user (nothing here needs root, nothing here writes). remote runs it as
#   /usr/bin/env -i PATH=/usr/bin:/bin /bin/bash --norc --noprofile -c "$(cat rootchain.sh)" rootchain PATH...
# so that nothing the login account exports (a BASH_FUNC_stat%% function, a stat earlier on PATH) answers for it;
# every program below is called by its absolute path for the same reason.
# For each PATH, one line per answer, `PATH<TAB>WHAT<TAB>ANSWER` (remote.sudo.unsafe reads them):
#   /a/b        UID MODE TYPE | missing   every component from / down, of every hop: a symbolic link met on the
#               | unsearchable            way (part-way or last) is followed one hop at a time, relative links
#                                         against their own folder, and the path it leads to walked from / again;
#                                         unsearchable: its folder cannot be looked into (what it is is unknown)
#   @program    elf|script|other|unreadable|missing|loop REAL[<TAB>INTERPRETER]   what the last hop is
#   @interpreter:/a/b  UID MODE TYPE | missing   the same walk of a script's `#!` interpreter
#   @interpreter-is    elf|script|other|unreadable|missing|loop|relative REAL    what the interpreter is
#   @args              ARGS            what the `#!` line gives its interpreter (the kernel passes it as one word)
#   @env-finds         elf|...|missing REAL   `#!/usr/bin/env NAME`: the NAME env finds on sudo's PATH (SUDO_PATH,
#                                      every folder of it up to that one walked as @interpreter: too)
#   @beside:/a/b       UID MODE TYPE   each file and folder (the whole tree) beside a script that is not Proxmox's
#                                      own: what it may load from its own folder (Python imports from there first)
#   @sources           LINE            a shell script's `.`/`source` line (a file it runs as root)
#   @end        done                   the answer for PATH is whole
set -u
STAT=/usr/bin/stat
HOPS=40  # as the kernel's own limit on links followed while resolving one name
# Where `env NAME` finds NAME when sudo runs the script: Debian's and Proxmox VE's default secure_path (sudo resets
# PATH to it), searched in order, so a folder before the one NAME is in could hide another NAME: each is walked.
SUDO_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# walk TAG PATH: print TAG-prefixed components of PATH from / down, stopping at the first symbolic link (its
# next hop in $next) or the first missing name; $next is empty when PATH was walked to its end.
walk() {
  local tag=$1 path=$2 sofar="" part i target rest
  local -a parts
  next=""
  printf '%s\t%s/\t%s\n' "$want" "$tag" "$("$STAT" -c '%u %a %F' -- /)"
  IFS=/ read -ra parts <<< "${path#/}"
  for ((i = 0; i < ${#parts[@]}; i++)); do
    part=${parts[i]}
    case $part in
      "" | .) continue ;;
      ..) sofar=${sofar%/*}; continue ;;  # no link lies in $sofar (a hop ends at the first): plain text is right
    esac
    sofar="$sofar/$part"
    if [ -L "$sofar" ]; then
      printf '%s\t%s%s\t%s\n' "$want" "$tag" "$sofar" "$("$STAT" -c '%u %a %F' -- "$sofar")"
      target=$(/usr/bin/readlink -- "$sofar")
      [ "${target#/}" != "$target" ] || target="${sofar%/*}/$target"  # relative: against the link's folder
      rest=$(IFS=/; printf '%s' "${parts[*]:i+1}")
      next="$target${rest:+/$rest}"
      return 0
    elif [ -e "$sofar" ]; then
      printf '%s\t%s%s\t%s\n' "$want" "$tag" "$sofar" "$("$STAT" -c '%u %a %F' -- "$sofar")"
    elif [ ! -x "${sofar%/*}/" ]; then
      # Not "missing": the login user cannot look inside the folder, so what the name is (a link into /tmp?)
      # cannot be told. Said so, never taken for a name only root could make.
      printf '%s\t%s%s\tunsearchable\n' "$want" "$tag" "$sofar"
      real=""
      return 0
    else
      printf '%s\t%s%s\tmissing\n' "$want" "$tag" "$sofar"
      real=""
      return 0
    fi
  done
  real=${sofar:-/}
}

# resolve TAG PATH: walk every hop; $real is the file it ends at ("" where a name is missing), $kind what it is.
resolve() {
  local tag=$1 path=$2 hop
  real="" kind=loop
  for ((hop = 0; hop < HOPS; hop++)); do
    walk "$tag" "$path"
    if [ -n "$next" ]; then
      path=$next
      continue
    fi
    if [ -z "$real" ]; then
      kind=missing
    elif [ ! -f "$real" ]; then
      kind=other
    elif [ ! -r "$real" ]; then
      kind=unreadable
    else
      local magic
      magic=$(/usr/bin/head -c 4 -- "$real" 2>/dev/null | /usr/bin/od -An -c | /usr/bin/tr -d ' \n')
      case $magic in
        '177ELF') kind=elf ;;
        '#!'*) kind=script ;;
        *) kind=other ;;
      esac
    fi
    return 0
  done
}

for want in "$@"; do
  resolve "" "$want"
  program=$real
  if [ "$kind" != script ]; then
    printf '%s\t@program\t%s %s\n' "$want" "$kind" "$program"
  else
    IFS= read -r line < "$program" || true
    line=${line#\#!}
    read -r interpreter args <<< "$line"
    printf '%s\t@program\tscript %s\t%s\n' "$want" "$program" "$interpreter"
    # the rest of the line reaches the interpreter as options (perl -I/tmp/x, bash --rcfile F load code): said whole
    printf '%s\t@args\t%s\n' "$want" "${args//[$'\t\r']/?}"
    if [ "${interpreter#/}" = "$interpreter" ]; then
      printf '%s\t@interpreter-is\trelative %s\n' "$want" "$interpreter"
    else
      resolve "@interpreter:" "$interpreter"
      printf '%s\t@interpreter-is\t%s %s\n' "$want" "$kind" "$real"
      if [ "${real##*/}" = env ] || [ "${interpreter##*/}" = env ]; then
        found="missing "
        case $args in
          "" | -* | */* | *[!A-Za-z0-9_.+-]*) ;;  # not one plain name: remote.sudo refuses it by @args alone
          *)
            IFS=: read -ra dirs <<< "$SUDO_PATH"
            for dir in "${dirs[@]}"; do
              resolve "@interpreter:" "$dir"
              if [ -f "$dir/$args" ] && [ -x "$dir/$args" ]; then  # what env runs: the first executable file
                resolve "@interpreter:" "$dir/$args"
                found="$kind $real"
                break
              fi
            done ;;
        esac
        printf '%s\t@env-finds\t%s\n' "$want" "$found"
      fi
    fi
    case $program in
      /usr/sbin/pct | /usr/sbin/pvesm | /usr/bin/pvesh) ;;  # Proxmox's own: Perl of its packages, in /usr/share/perl5
      *)
        # NUL-separated, so that a name with a newline or a tab in it cannot add a line of its own to the answer
        /usr/bin/find "${program%/*}" -mindepth 1 -printf '%U %m %y %p\0' 2>/dev/null \
          | while IFS=' ' read -r -d '' uid mode type name; do
              case $name in
                *$'\n'* | *$'\t'*) printf '%s\t@beside:%s\todd name\n' "$want" "${name//[$'\t\n']/?}" ;;
                *) printf '%s\t@beside:%s\t%s %s %s\n' "$want" "$name" "$uid" "$mode" "$type" ;;
              esac
            done
        # find fails where it cannot read a folder (the login user's permissions): what lies there is unchecked
        [ "${PIPESTATUS[0]}" = 0 ] || printf '%s\t@beside:%s\tunreadable\n' "$want" "${program%/*}"
        case ${interpreter##*/} in
          sh | bash | dash | ksh | mksh | zsh | busybox)
            /usr/bin/grep -nE '^[[:space:]]*(\.|source)[[:space:]]' -- "$program" 2>/dev/null \
              | while IFS= read -r found; do printf '%s\t@sources\t%s\n' "$want" "$found"; done ;;
        esac ;;
    esac
  fi
  printf '%s\t@end\tdone\n' "$want"
done
