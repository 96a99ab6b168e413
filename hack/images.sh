#!/usr/bin/env bash
# Container images without a container engine or registry: OCI archives made
# with umoci from binaries built on this machine, for hack/cluster.sh to
# import with ctr. The same contents as the Dockerfiles' images (the binary,
# glibc and libgcc from this Debian 12 host like distroless cc-debian12, a
# CA bundle, passwd/group with the distroless "nonroot" user 65532), which
# normal CI builds with docker instead.
#
#   hack/images.sh [operator] [emulator] [pause]     default: all three
#
# Inputs: target/$P4FLEET_IMAGE_PROFILE/p4fleet and .../p4fleet-emulator
# (profile release, the default: `cargo build --release --workspace --bins`;
# debug: `cargo build --workspace --all-targets`, what `make e2e-cluster`
# uses), bin/pause (`hack/install-deps.sh cluster`). Output: .local/images/NAME.tar, an OCI
# archive whose one image is tagged $P4FLEET_IMAGE_TAG (default e2e; pause:
# 3.10); rebuilt only when its inputs change. Prints one line per image:
# `NAME ARCHIVE TAG`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$REPO/.local/images"
TAG="${P4FLEET_IMAGE_TAG:-e2e}"
PROFILE="${P4FLEET_IMAGE_PROFILE:-release}"
[[ "$PROFILE" == debug || "$PROFILE" == release ]] || { echo "images: P4FLEET_IMAGE_PROFILE=$PROFILE: want debug or release" >&2; exit 2; }

log() { echo "images: $*" >&2; }
die() { log "error: $*"; exit 1; }

command -v umoci >/dev/null || die "umoci not in PATH; run hack/install-deps.sh cluster"

# The shared libraries a dynamic binary needs, plus its interpreter.
libs_of() {
  ldd "$1" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
}

populate_base() { # rootfs
  local root="$1"
  mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  chown 65532:65532 "$root/home/nonroot"
  chmod 700 "$root/home/nonroot"
  cat > "$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat > "$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
nonroot:x:65532:
EOF
  printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
}

add_binary() { # rootfs binary dest
  install -D -m 0755 "$2" "$1$3"
  # Like the Dockerfiles' CARGO_PROFILE_RELEASE_DEBUG=0: symbols stay for
  # backtraces, line tables go.
  strip --strip-debug "$1$3"
  if ldd "$2" >/dev/null 2>&1; then
    local lib
    for lib in $(libs_of "$2"); do
      install -D -m 0755 "$(readlink -f "$lib")" "$1$lib"
    done
  fi
}

# build NAME TAG BINARY DEST USER ENTRYPOINT [CMD...]
build() {
  local name="$1" tag="$2" binary="$3" dest="$4" user="$5" entrypoint="$6"
  shift 6
  [[ -x "$binary" ]] || die "$binary missing (operator/emulator: cargo build --release --workspace --bins, or with P4FLEET_IMAGE_PROFILE=debug cargo build --workspace --all-targets; pause: hack/install-deps.sh cluster)"
  local archive="$OUT/$name.tar" stamp
  stamp="$(cat "$binary" "${BASH_SOURCE[0]}" <(echo "$tag") | sha256sum | cut -d' ' -f1)"
  if [[ -f "$archive" && "$(cat "$OUT/.$name.stamp" 2>/dev/null)" == "$stamp" ]]; then
    echo "$name $archive $tag"
    return 0
  fi
  local t0=$SECONDS work="$SCRATCH/$name"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$tag"
  umoci unpack --image "$work/oci:$tag" "$work/bundle" >/dev/null
  populate_base "$work/bundle/rootfs"
  add_binary "$work/bundle/rootfs" "$binary" "$dest"
  umoci repack --image "$work/oci:$tag" "$work/bundle"
  local cfg=(--config.user "$user" --config.entrypoint "$entrypoint" --config.workingdir /
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
    --config.label "org.opencontainers.image.title=$name"
    --config.label "org.opencontainers.image.source=https://github.com/p4fleet/p4fleet")
  local c
  for c in "$@"; do cfg+=(--config.cmd "$c"); done
  umoci config --image "$work/oci:$tag" "${cfg[@]}"
  umoci gc --layout "$work/oci"
  mkdir -p "$OUT"
  tar -C "$work/oci" -cf "$archive.tmp" oci-layout index.json blobs
  mv "$archive.tmp" "$archive"
  echo "$stamp" > "$OUT/.$name.stamp"
  log "$name: $archive ($(du -h "$archive" | cut -f1), $((SECONDS - t0))s)"
  echo "$name $archive $tag"
}

SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT

targets=("$@")
(( ${#targets[@]} )) || targets=(operator emulator pause)
for t in "${targets[@]}"; do
  case "$t" in
    operator) build p4fleet "$TAG" "$REPO/target/$PROFILE/p4fleet" /p4fleet 65532:65532 /p4fleet operator ;;
    emulator) build p4fleet-emulator "$TAG" "$REPO/target/$PROFILE/p4fleet-emulator" /p4fleet-emulator 65532:65532 /p4fleet-emulator ;;
    pause) build pause 3.10 "$REPO/bin/pause" /pause 65535:65535 /pause ;;
    *) die "unknown image $t (operator, emulator, pause)" ;;
  esac
done
