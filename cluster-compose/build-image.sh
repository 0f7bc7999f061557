#!/usr/bin/env bash
# Build the test cluster's Redis image OFFLINE (no registry needed) from
# Debian's redis-server package: a tiny rootfs holding redis-server,
# redis-cli, /bin/sh + sleep (for the compose init loop), every library ldd
# lists and the dynamic loader, imported with `docker import`.
#   usage: build-image.sh [--force]     (skips if the image exists)
#   env:   SHARDLIMIT_REDIS_IMAGE       (default shardlimit/redis:7.0-debian)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

image=${SHARDLIMIT_REDIS_IMAGE:-$OFFLINE_IMAGE}
# Never shadow the official image's tag with our home-made one.
[[ $image == redis || $image == redis:* ]] && die "refusing to tag the offline build as $image"
if [ "${1:-}" != --force ] && docker image inspect "$image" >/dev/null 2>&1; then
  say "image $image already exists (use --force to rebuild)"; exit 0
fi

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  apt_install redis-server redis-tools
fi

root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{usr/bin,bin,etc,data,tmp}; chmod 1777 "$root/tmp"
# cp -L and keep the name: Debian's redis-check-* are symlinks to the same
# binary, which picks its personality from argv[0], so the file must be
# called redis-server (and a symlink would dangle inside the image).
cp -L "$(command -v redis-server)" "$root/usr/bin/redis-server"
cp -L "$(command -v redis-cli)" "$root/usr/bin/redis-cli"
cp -L /bin/sh "$root/bin/sh"          # dash; runs the compose init loop
cp -L "$(command -v sleep)" "$root/bin/sleep"
# Every shared library plus the loader (ldd prints it as a bare path).
for bin in "$root"/usr/bin/* "$root"/bin/*; do ldd "$bin"; done |
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u |
  while read -r lib; do mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; done
printf 'root:x:0:0:root:/root:/bin/sh\nredis:x:999:999::/data:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nredis:x:999:\n' >"$root/etc/group"

# No ENTRYPOINT, binaries on PATH: a compose `command: redis-server ...`
# then works unchanged for this image and for the official one (whose
# docker-entrypoint.sh also accepts `redis-server ...`).
tar -C "$root" --numeric-owner --owner=0 --group=0 -c . |
  docker import -m "redis $(redis-server --version | awk '{print $3}') from Debian, offline build" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'WORKDIR /data' --change 'VOLUME /data' \
    --change 'CMD ["redis-server", "--protected-mode", "no"]' \
    - "$image" >/dev/null
say "built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.1f MB", $1/1e6}'))"
