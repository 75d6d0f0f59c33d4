# The driver's user space for GPU containers (remote.ops.gpuconfig, remote.ops.create, `remote gpu fix`):
# fills DEST on the Proxmox host with the host's OWN user-space driver files of the LOADED module's version
# (the list nvidia-container-cli mounts: libcuda, libnvidia-ml, libnvidia-ptxjitcompiler, libnvidia-nvvm, ...
# and nvidia-smi), which containers bind-mount read-only (an mpN line). Exact by construction: the host's
# files, never a download; a host whose files on disk are newer than the loaded module (a reboot pending)
# keeps the folder of the loaded version, or is refused when it has no file of that version.
# Usage: bash -c "$(cat nvidia-userspace.sh)" nvidia-userspace DEST [--check]
# DEST/<version>/{lib,bin,VERSION} and DEST/current -> <version> (swapped atomically, so a container that has
# DEST mounted sees the new files at once; the old version's folder is removed). --check writes nothing.
# Every host path is read and written under ${REMOTE_GPU_SYSROOT:-} (empty on a real host; the lab's fake
# driver's root). Prints `key value` lines: version, state (unchanged|filled|stale|missing), files, dest.
# Exit: 0 ok; 3 no NVIDIA module loaded; 4 the loaded version's files are not on the host; 5 --check: stale.
set -euo pipefail
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
dest=$root$1
check=${2:-}
libs=(libcuda libcudadebugger libnvidia-ml libnvidia-ptxjitcompiler libnvidia-nvvm libnvidia-gpucomp
  libnvidia-opencl libnvidia-allocator libnvidia-cfg libnvidia-compiler libnvidia-fatbinaryloader
  libnvidia-pkcs11 libnvidia-pkcs11-openssl3 libnvidia-nvvm70)
bins=(nvidia-smi nvidia-debugdump nvidia-cuda-mps-control nvidia-cuda-mps-server)
libdirs=(/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu /lib64)
bindirs=(/usr/bin /usr/sbin /bin)
# On a real host, also where the loader finds the driver (a driver installed elsewhere: /usr/local/nvidia/lib64,
# a .run installer's prefix) and where PATH finds nvidia-smi.
if [ -z "$root" ]; then
  while read -r dir; do
    libdirs=("$dir" "${libdirs[@]}")
  done < <( (ldconfig -p 2> /dev/null || /sbin/ldconfig -p 2> /dev/null || true) | sed -n 's/^[[:space:]]*libcuda\.so\.1 (.*x86-64.*) => \(.*\)\/libcuda\.so\.1$/\1/p; s/^[[:space:]]*libcuda\.so\.1 (.*AArch64.*) => \(.*\)\/libcuda\.so\.1$/\1/p' | tac)
  smi=$(command -v nvidia-smi || true)
  [ -n "$smi" ] && bindirs=("${smi%/*}" "${bindirs[@]}")
fi

version=""
if [ -r "$root/proc/driver/nvidia/version" ]; then
  version=$(sed -n 's/^NVRM version:.*[[:space:]]\([0-9][0-9]*\.[0-9][0-9.]*\)[[:space:]].*/\1/p' \
    "$root/proc/driver/nvidia/version" | head -n 1)
fi
if [ -z "$version" ] && [ -r "$root/sys/module/nvidia/version" ]; then
  version=$(tr -d '[:space:]' < "$root/sys/module/nvidia/version")
fi
if [ -z "$version" ]; then
  echo "error no NVIDIA kernel module is loaded on the host (no /proc/driver/nvidia/version)"
  exit 3
fi
# It names folders this script replaces and removes (DEST/VERSION): numbers and dots only, never `..` or a `/`.
if ! [[ $version =~ ^[0-9]+(\.[0-9]+)+$ ]]; then
  printf 'error the loaded module names its version %q, not NUMBER.NUMBER...: nothing written\n' "${version:0:80}"
  exit 3
fi
echo "version $version"

# The loaded version's files (a library's versioned file, e.g. libcuda.so.580.95.05; a binary as it is).
found=()
for name in "${libs[@]}"; do
  for dir in "${libdirs[@]}"; do
    if [ -f "$root$dir/$name.so.$version" ]; then
      found+=("$root$dir/$name.so.$version")
      break
    fi
  done
done
have_cuda=""
have_ml=""
for f in "${found[@]}"; do
  case ${f##*/} in
    libcuda.so.*) have_cuda=1 ;;
    libnvidia-ml.so.*) have_ml=1 ;;
  esac
done
# A pending reboot after an upgrade that removed the loaded version's files: a folder filled before it already
# holds them (its VERSION the loaded one, libcuda and libnvidia-ml there): it stays as it is.
if { [ -z "$have_cuda" ] || [ -z "$have_ml" ]; } && [ "$(cat "$dest/current/VERSION" 2> /dev/null || true)" = "$version" ] \
  && [ -f "$dest/current/lib/libcuda.so.$version" ] && [ -f "$dest/current/lib/libnvidia-ml.so.$version" ]; then
  kept=("$dest"/current/lib/*.so."$version" "$dest"/current/bin/*)
  echo "files ${#kept[@]}"
  echo "dest $1"
  echo "state unchanged"
  exit 0
fi
if [ -z "$have_cuda" ] || [ -z "$have_ml" ]; then
  others=""
  for dir in "${libdirs[@]}"; do
    for f in "$root$dir"/libcuda.so.[0-9]*.*; do
      [ -f "$f" ] && others="$others ${f##*/libcuda.so.}"
    done
  done
  echo "error the host has no libcuda.so.$version and libnvidia-ml.so.$version of the loaded module $version" \
    "(libcuda versions on disk:${others:- none}): install the driver's user space of $version, or reboot into the" \
    "module the files on disk belong to"
  exit 4
fi
bin_found=()
for name in "${bins[@]}"; do
  for dir in "${bindirs[@]}"; do
    if [ -f "$root$dir/$name" ]; then
      bin_found+=("$root$dir/$name")
      break
    fi
  done
done
echo "files $((${#found[@]} + ${#bin_found[@]}))"
echo "dest $1"

# Already the loaded version, every library the same size as the host's: nothing to do.
same=1
current=$dest/current
if [ "$(cat "$current/VERSION" 2> /dev/null || true)" != "$version" ]; then
  same=""
else
  for f in "${found[@]}"; do
    [ "$(stat -c %s "$f")" = "$(stat -c %s "$current/lib/${f##*/}" 2> /dev/null || echo x)" ] || same=""
  done
  # Binaries carry no version in their name: after an upgrade the host's nvidia-smi is the new one while the
  # old module is still loaded, so a folder of the loaded version keeps the binaries it has.
  for f in "${bin_found[@]}"; do
    [ -f "$current/bin/${f##*/}" ] || same=""
  done
fi
if [ -n "$same" ]; then
  echo "state unchanged"
  exit 0
fi
if [ "$check" = "--check" ]; then
  if [ -e "$current/VERSION" ]; then
    echo "state stale $(cat "$current/VERSION")"
  else
    echo "state missing"
  fi
  exit 5
fi

mkdir -p "$dest"
exec 9> "$dest/.lock"
flock 9
stage=$dest/.stage-$version.$$
rm -rf "$stage"
mkdir -p "$stage/lib" "$stage/bin"
for f in "${found[@]}"; do
  cp -p "$f" "$stage/lib/"
  base=${f##*/}
  name=${base%.so.*}
  # The sonames the host's own links give (libcuda.so.1, libnvidia-nvvm.so.4), else NAME.so.1; and NAME.so.
  made=""
  for link in "${f%/*}/$name".so.*; do
    [ -L "$link" ] || continue
    target=$(readlink "$link")
    case $target in
      */*) continue ;;
      "$base" | "$name".so.*) ln -sfn "$target" "$stage/lib/${link##*/}" && made=1 ;;
    esac
  done
  [ -n "$made" ] || ln -sfn "$base" "$stage/lib/$name.so.1"
  [ -e "$stage/lib/$name.so" ] || ln -sfn "$base" "$stage/lib/$name.so"
done
for f in "${bin_found[@]}"; do
  cp -p "$f" "$stage/bin/"
done
echo "$version" > "$stage/VERSION"
chmod -R a+rX "$stage"
rm -rf "${dest:?}/$version"
mv "$stage" "$dest/$version"
ln -sfn "$version" "$dest/.current.new"
mv -T "$dest/.current.new" "$dest/current"
for old in "$dest"/*; do
  [ "${old##*/}" = "$version" ] || [ "${old##*/}" = current ] || rm -rf "$old"
done
echo "state filled"
