# A checkpoint carried across a rollback (remote/ops/carry.py), the container's half. The host's half is
# `pct pull`/`pct push` of ONE file at the stage path, so a folder travels as a tar made here.
#   pack SRC STAGE            SRC (a file, or a folder: tarred) to STAGE; prints `kind=`, `size=`, `sha=`
#   unpack STAGE DEST KIND SHA  STAGE verified against SHA (exit 4 where it differs: nothing placed), then put
#                             at DEST (its parents made; a DEST already there, e.g. an older checkpoint the
#                             snapshot held, renamed aside `DEST.old-<time>`, never deleted); prints `placed=`
#                             and `aside=`
#   drop STAGE                STAGE removed (after the pull: the host holds the copy now)
mode=$1
case $mode in
  pack)
    src=$2 stage=$3
    rm -f -- "$stage"
    if [ -d "$src" ]; then
      tar -C "$(dirname -- "$src")" -cf "$stage" -- "$(basename -- "$src")"
      echo "kind=folder"
    else
      # A hard link where it can (the job is stopped: nothing writes the checkpoint now), else a copy.
      ln -- "$src" "$stage" 2>/dev/null || cp -p --reflink=auto -- "$src" "$stage"
      echo "kind=file"
    fi
    echo "size=$(stat -c %s -- "$stage")"
    echo "sha=$(sha256sum -- "$stage" | cut -c1-64)"
    ;;
  unpack)
    stage=$2 dest=$3 kind=$4 want=$5
    got=$(sha256sum -- "$stage" | cut -c1-64)
    if [ "$got" != "$want" ]; then
      echo "sha=$got"
      exit 4
    fi
    mkdir -p -- "$(dirname -- "$dest")"
    aside=
    if [ -e "$dest" ] || [ -L "$dest" ]; then
      aside="$dest.old-$(date +%Y%m%d-%H%M%S)"
      n=1
      while [ -e "$aside" ]; do n=$((n + 1)); aside="$dest.old-$(date +%Y%m%d-%H%M%S).$n"; done
      mv -- "$dest" "$aside"
    fi
    if [ "$kind" = folder ]; then
      tar -C "$(dirname -- "$dest")" -xf "$stage"
      rm -f -- "$stage"
    else
      mv -- "$stage" "$dest"
    fi
    echo "placed=$dest"
    echo "aside=$aside"
    ;;
  drop)
    rm -f -- "$2"
    ;;
  *)
    echo "carry.sh: unknown mode $mode" >&2
    exit 2 ;;
esac
