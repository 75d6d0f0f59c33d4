# What a rollback carries (remote/ops/carry.py), the container's half: the latest complete checkpoint and the
# run folders, which the rollback would return to the snapshot's. The host's half is `pct pull`/`pct push` of
# ONE file at the stage path, so everything travels as ONE tar made here: `ckpt/payload` (the checkpoint, a
# file or a folder), `runs/<id>/` (each run folder of the run_dir), `current` (the latest run's id).
#   pack SRC STAGE RUN_DIR CAP  SRC (empty: none) and RUN_DIR's run folders (empty: none) tarred to STAGE (hard
#                             links first where it can: the job is stopped, nothing writes them now); a file of
#                             a run folder over CAP bytes is left out, named (`skipped=SIZE PATH`); prints
#                             `kind=` (file, folder, none), `runs=`, `runs_bytes=`, `size=`, `sha=`
#   unpack STAGE DEST KIND SHA RUN_DIR  STAGE verified against SHA (exit 4 where it differs: nothing placed);
#                             the checkpoint put at DEST (its parents made; a DEST already there, e.g. an older
#                             checkpoint the snapshot held, renamed aside `DEST.old-<time>`, never deleted),
#                             prints `placed=` and `aside=`; each run folder the rollback took put back in
#                             RUN_DIR (`back=ID`), one the snapshot holds left as it is where it is the same, else
#                             the carried copy kept in RUN_DIR/.carried-<time>/ (`differs=ID`, `kept=FOLDER`);
#                             `current` pointed at the carried latest run (`current=ID`)
#   drop STAGE                STAGE (and its work folder) removed (after the pull: the host holds the copy now)
mode=$1
# A name the container chose, printed on one line of ours: no control characters (nor a newline) in it.
clean() { printf '%s' "$1" | tr -c '[:print:]' '?'; }
case $mode in
  pack)
    src=$2 stage=$3 run_dir=$4 cap=$5
    work=$stage.d
    rm -rf -- "$work" "$stage"
    mkdir -p -- "$work/runs"
    kind=none
    if [ -n "$src" ]; then
      mkdir -- "$work/ckpt"
      if [ -d "$src" ]; then
        cp -al -- "$src" "$work/ckpt/payload" 2>/dev/null \
          || { rm -rf -- "$work/ckpt/payload"; cp -a -- "$src" "$work/ckpt/payload"; } || exit 3
        kind=folder
      else
        ln -- "$src" "$work/ckpt/payload" 2>/dev/null || cp -p --reflink=auto -- "$src" "$work/ckpt/payload" || exit 3
        kind="file"
      fi
    fi
    runs=0
    if [ -n "$run_dir" ] && [ -d "$run_dir" ]; then
      for d in "$run_dir"/*/; do
        d=${d%/}
        [ ! -L "$d" ] || continue  # `current` (a link to the latest) is no run of its own
        [ -e "$d/manifest.json" ] || [ -e "$d/pid" ] || continue  # a run's folder (as runs.sh counts them)
        id=${d##*/}
        cp -al -- "$d" "$work/runs/$id" 2>/dev/null \
          || { rm -rf -- "$work/runs/$id"; cp -a -- "$d" "$work/runs/$id"; } || exit 3
        runs=$((runs + 1))
      done
      # A large file in a run folder (something the job wrote there) is not carried: named, never deleted here.
      find "$work/runs" -type f -size +"${cap}c" -print0 | while IFS= read -r -d '' f; do
        echo "skipped=$(stat -c %s -- "$f") $(clean "$run_dir/${f#"$work/runs/"}")"
        rm -f -- "$f"
      done
      readlink -- "$run_dir/current" > "$work/current" 2>/dev/null || true
    fi
    runs_bytes=$(du -sb -- "$work/runs" | cut -f1)
    if ! tar -C "$work" -cf "$stage" .; then
      rm -rf -- "$work" "$stage"
      exit 3
    fi
    rm -rf -- "$work"
    echo "kind=$kind"
    echo "runs=$runs"
    echo "runs_bytes=$runs_bytes"
    echo "size=$(stat -c %s -- "$stage")"
    echo "sha=$(sha256sum -- "$stage" | cut -c1-64)"
    ;;
  unpack)
    stage=$2 dest=$3 kind=$4 want=$5 run_dir=$6
    work=$stage.d
    got=$(sha256sum -- "$stage" | cut -c1-64)
    if [ "$got" != "$want" ]; then
      echo "sha=$got"
      exit 4
    fi
    rm -rf -- "$work"
    mkdir -p -- "$work"
    tar -C "$work" -xf "$stage" || { rm -rf -- "$work"; exit 5; }
    rm -f -- "$stage"
    if [ "$kind" != none ]; then
      mkdir -p -- "$(dirname -- "$dest")"
      aside=
      if [ -e "$dest" ] || [ -L "$dest" ]; then
        aside="$dest.old-$(date +%Y%m%d-%H%M%S)"
        n=1
        while [ -e "$aside" ]; do n=$((n + 1)); aside="$dest.old-$(date +%Y%m%d-%H%M%S).$n"; done
        mv -- "$dest" "$aside"
      fi
      mv -- "$work/ckpt/payload" "$dest" || exit 5
      [ -e "$dest" ] || exit 5  # what was placed is there, or nothing is said placed
      echo "placed=$dest"
      echo "aside=$aside"
    fi
    if [ -n "$run_dir" ] && [ -d "$work/runs" ]; then
      mkdir -p -- "$run_dir"
      kept=
      for d in "$work/runs"/*/; do
        [ -d "$d" ] || continue
        d=${d%/}
        id=${d##*/}
        if [ ! -e "$run_dir/$id" ] && [ ! -L "$run_dir/$id" ]; then
          mv -- "$d" "$run_dir/$id" || exit 5
          echo "back=$(clean "$id")"
        elif ! diff -rq -- "$d" "$run_dir/$id" > /dev/null 2>&1; then
          # The snapshot holds this run as it was then: left as it is, the carried copy kept beside it.
          [ -n "$kept" ] || { kept="$run_dir/.carried-$(date +%Y%m%d-%H%M%S)"; mkdir -p -- "$kept"; }
          mv -- "$d" "$kept/$id" || exit 5
          echo "differs=$(clean "$id")"
        fi
      done
      [ -z "$kept" ] || echo "kept=$(clean "$kept")"
      current=$(cat -- "$work/current" 2>/dev/null || true)
      case $current in
        '' | */* | .*) ;;
        *)
          if [ -d "$run_dir/$current" ] && [ ! -L "$run_dir/$current" ]; then
            ln -sfn -- "$current" "$run_dir/current.tmp" && mv -T -- "$run_dir/current.tmp" "$run_dir/current"
            echo "current=$(clean "$current")"
          fi ;;
      esac
    fi
    rm -rf -- "$work"
    ;;
  drop)
    rm -rf -- "$2" "$2.d"
    ;;
  *)
    echo "carry.sh: unknown mode $mode" >&2
    exit 2 ;;
esac
