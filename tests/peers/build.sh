#!/usr/bin/env bash
# Builds the real peer programs (kube-apiserver, etcd, the HAProxy Dataplane API, helm) and the
# kubectl the tests run, from their published Go modules, once per machine, cached under
#   ${HAPTIC_PEERS_CACHE:-$HOME/.cache/haptic-peers}/<pins-hash>/bin
# and prints that directory on the LAST line of stdout; everything else goes to stderr.
#
# <pins-hash> covers the PINS block below, the per-peer package and -X flags, the go.mod/go.sum/*.go
# files of the modules under tests/peers/{kube,etcd,dataplaneapi,helm}/ and the Go version, so a
# rebuild happens only when one of those changes. The Go module and build caches live under the cache dir, not in the user's
# default GOMODCACHE/GOCACHE: ${HAPTIC_PEERS_CACHE}/go/{mod,build}, shared by every pins-hash (a
# pin bump downloads and compiles only what changed).
#
# Usage:
#   tests/peers/build.sh [PEER...]   build the peers not yet cached; print the bin dir
#       PEER: kube-apiserver kubectl etcd dataplaneapi helm (default: $HAPTIC_PEERS, else all but
#       dataplaneapi, whose module the Go module proxy refuses (403) for now: ask for it by name);
#       kube-apiserver and kubectl come from the same k8s.io/kubernetes module (tests/peers/kube)
#   --force   rebuild even if cached
#   --check   build nothing: print the bin dir when the peers are cached, else fail naming
#             this script (what the test kit runs, so a test never starts a 13-minute build)
#   --regen   rewrite the go.mod/go.sum files from the pins (after a pin bump; commit the
#             result), then build
# Progress on stderr: one line per peer when its build starts and when it ends (with its elapsed
# time), and a heartbeat every $HAPTIC_PEERS_HEARTBEAT seconds (default 60) while one builds.
# Exit status: non-zero, with the module and the go error named, when a requested peer fails.
# Needs: go >= 1.26 and the Go module proxy; flock, sha256sum.
set -euo pipefail

# ---- BEGIN PINS (part of the cache key) ----
KUBE_VERSION=v1.37.2    # k8s.io/kubernetes; its staging modules (k8s.io/api, ...) replaced by v0.37.2
ETCD_VERSION=v3.7.3     # go.etcd.io/etcd/server/v3; kube v1.37.2 is built against etcd client v3.7.0
DATAPLANEAPI_TAG=v3.4.2 # github.com/haproxytech/dataplaneapi, serves /v3; its go.mod has no /v3 suffix,
DATAPLANEAPI_COMMIT=8613429f11a6bb0b0314b245ce7a0228536991fc # so: the tag's commit, as a pseudo-version
DATAPLANEAPI_PSEUDO=v1.2.5-0.20260814095652-8613429f11a6     # (base: v1.2.4, its newest v1 ancestor tag)
HELM_VERSION=v4.3.1     # helm.sh/helm/v4
BUILD_FLAGS=(-trimpath) # plus -ldflags "$LDFLAGS <per-peer -X version flags>"; always CGO_ENABLED=0
LDFLAGS="-s -w"
# ---- END PINS ----

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script="$here/$(basename "${BASH_SOURCE[0]}")"
cache=${HAPTIC_PEERS_CACHE:-$HOME/.cache/haptic-peers}
all_peers=(kube-apiserver kubectl etcd dataplaneapi helm)
default_peers=(kube-apiserver kubectl etcd helm)
heartbeat=${HAPTIC_PEERS_HEARTBEAT:-60}

log() { printf 'peers: %s\n' "$*" >&2; }
elapsed() { local s=$(( $(date +%s) - $1 )); if (( s >= 60 )); then echo "$((s / 60)) min $((s % 60)) s"; else echo "$s s"; fi; }
die() { printf 'peers: error: %s\n' "$*" >&2; exit 1; }

force=0 regen=0 check=0 peers=()
for a in "$@"; do
  case $a in
    --force) force=1 ;;
    --check) check=1 ;;
    --regen) regen=1; force=1 ;;
    -h|--help) sed -n '2,27p' "$script" >&2; exit 0 ;;
    kube-apiserver|kubectl|etcd|dataplaneapi|helm) peers+=("$a") ;;
    *) die "unknown argument: $a (see --help)" ;;
  esac
done
if (( ${#peers[@]} == 0 )); then
  read -ra peers <<<"${HAPTIC_PEERS:-${default_peers[*]}}"
  [[ -n ${HAPTIC_PEERS:-} ]] || log "not building dataplaneapi by default: the Go module proxy refuses github.com/haproxytech/dataplaneapi (403 Forbidden, \"This module version is not available\"); run $0 dataplaneapi to try"
fi
for p in "${peers[@]}"; do
  [[ " ${all_peers[*]} " == *" $p "* ]] || die "unknown peer in HAPTIC_PEERS: $p (one of: ${all_peers[*]})"
done

command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26 and the Go module proxy)"
goversion=$(go env GOVERSION)
mkdir -p "$cache/go/mod" "$cache/go/build"
export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build"
export GOFLAGS="-mod=mod -modcacherw" GOTOOLCHAIN=local GOWORK=off
kube_minor=$(cut -d. -f2 <<<"$KUBE_VERSION")
staging_version="v0.${KUBE_VERSION#v1.}" # v1.37.2 -> v0.37.2

# per peer: module dir under tests/peers, module, pinned version, package, extra ldflags
dir() { case $1 in kube-apiserver|kubectl) echo kube ;; *) echo "$1" ;; esac; }
module() {
  case $1 in
    kube-apiserver|kubectl) echo k8s.io/kubernetes ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    dataplaneapi) echo github.com/haproxytech/dataplaneapi ;;
    helm) echo helm.sh/helm/v4 ;;
  esac
}
version() {
  case $1 in
    kube-apiserver|kubectl) echo "$KUBE_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    dataplaneapi) echo "$DATAPLANEAPI_PSEUDO" ;;
    helm) echo "$HELM_VERSION" ;;
  esac
}
package() {
  case $1 in
    kube-apiserver) echo k8s.io/kubernetes/cmd/kube-apiserver ;;
    kubectl) echo k8s.io/kubernetes/cmd/kubectl ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    dataplaneapi) echo github.com/haproxytech/dataplaneapi/cmd/dataplaneapi ;;
    helm) echo helm.sh/helm/v4/cmd/helm ;;
  esac
}
extra_ldflags() {
  local v
  case $1 in
    kube-apiserver|kubectl) # what kubernetes' hack/lib/version.sh sets, so /version (and
      # `kubectl version --client`) tell the real version
      for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
          "$v" "$KUBE_VERSION" "$v" "$v" "$kube_minor" "$v"
      done ;;
    etcd) ;; # etcd's version is a constant of go.etcd.io/etcd/api/v3/version
    dataplaneapi) # as upstream's .goreleaser.yml; /v3/info then reports "v3.4.2 8613429f" and, as
      # build_date, the commit's time (an empty BuildTime logs a time-parsing error on every /v3/info)
      v=${DATAPLANEAPI_PSEUDO#*-0.}; v=${v%%-*} # 20260814095652
      printf -- '-X main.GitRepo=https://github.com/haproxytech/dataplaneapi -X main.GitTag=%s -X main.GitCommit=%s -X main.GitDirty= -X main.BuildTime=%s' \
        "$DATAPLANEAPI_TAG" "${DATAPLANEAPI_COMMIT:0:8}" "${v:0:4}-${v:4:2}-${v:6:2}T${v:8:2}:${v:10:2}:${v:12:2}Z" ;;
    helm) printf -- '-X helm.sh/helm/v4/internal/version.version=%s -X helm.sh/helm/v4/internal/version.gitTreeState=clean' \
        "$HELM_VERSION" ;;
  esac
}
context() { echo "the module $(module "$1")@$(version "$1") (package $(package "$1"))"; }
# the peers built from module dir $1 (kube: kube-apiserver and kubectl), one per line
peers_of_dir() { local p; for p in "${all_peers[@]}"; do [[ $(dir "$p") != "$1" ]] || echo "$p"; done; }
# each module dir of the peers "$@" once, in order
dirs_of() { local p; for p in "$@"; do dir "$p"; done | awk '!seen[$0]++'; }

# ---- --regen: write a module's go.mod/go.sum from the pins ----
# Runs in a subshell called with ||, where set -e is off: every step checks.
regen_mod() {
  local p=$1 m kmod
  mkdir -p "$here/$(dir "$p")" && cd "$here/$(dir "$p")" || return 1
  rm -f go.mod go.sum
  go mod init "haptic/tests/peers/$(dir "$p")" 2>/dev/null && go mod edit -go=1.26.0 || return 1
  case $p in
    kube-apiserver)
      kmod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
      [[ -f $kmod ]] || { log "could not download k8s.io/kubernetes@$KUBE_VERSION's go.mod"; return 1; }
      # every staging module that kubernetes requires at v0.0.0 (it replaces them with ./staging/...)
      while read -r m; do
        go mod edit -replace="$m=$m@$staging_version" || return 1
      done < <(awk '$2 == "v0.0.0" && $1 ~ /^k8s.io\// {print $1}' "$kmod" | sort -u)
      go mod edit "-godebug=$(sed -n 's/^godebug //p' "$kmod" | head -1)" || return 1 ;;
  esac
  # the module at its pin, then a tool line per peer of this dir (go get -tool PKG would
  # upgrade the module)
  go get "$(module "$p")@$(version "$p")" || return 1
  while read -r m; do go mod edit -tool="$(package "$m")" || return 1; done < <(peers_of_dir "$(dir "$p")")
  go mod tidy
}
if (( regen )); then
  while read -r d; do
    p=$(peers_of_dir "$d" | sed -n 1p)
    log "regenerating tests/peers/$d/go.mod for $(context "$p") (tools: $(peers_of_dir "$d" | paste -sd ' '))"
    bak=$(mktemp -d); cp "$here/$d"/go.mod "$here/$d"/go.sum "$bak/" 2>/dev/null || true
    if ! (regen_mod "$p"); then
      cp "$bak"/go.* "$here/$d/" 2>/dev/null || true; rm -rf "$bak" # put the committed files back
      die "regenerating tests/peers/$d/go.mod for $(context "$p") failed: see the go error above"
    fi
    rm -rf "$bak"
  done < <(dirs_of "${peers[@]}")
fi

# ---- check the go.mod files against the pins ----
for p in "${peers[@]}"; do
  f="$here/$(dir "$p")/go.mod" m=$(module "$p") v=$(version "$p")
  [[ -f $f ]] || die "tests/peers/$(dir "$p")/go.mod is missing: run $script --regen $p"
  grep -Eq "^[[:space:]]*(require[[:space:]]+)?${m//./\\.} ${v//./\\.}( |$)" "$f" \
    || die "tests/peers/$(dir "$p")/go.mod does not require $m $v as pinned in build.sh: run $script --regen $p and commit"
done

# ---- the cache key: pins, Go version, every module's files ----
key=$( {
  sed -n '/^# ---- BEGIN PINS/,/^# ---- END PINS/p' "$script"
  declare -f module version package extra_ldflags # what is built, and how
  echo "$goversion $(go env GOOS GOARCH)"
  while read -r d; do
    for f in "$here/$d"/go.mod "$here/$d"/go.sum "$here/$d"/*.go; do
      if [[ -f $f ]]; then echo "== $d/$(basename "$f")"; cat "$f"; fi
    done
  done < <(dirs_of "${all_peers[@]}")
} | sha256sum | cut -c1-16)
out="$cache/$key"
bin="$out/bin"
mkdir -p "$bin"
exec 9>"$out/.lock"
flock 9 # one build per pins-hash at a time; a second caller waits, then finds the binaries

todo=()
for p in "${peers[@]}"; do
  if (( force )) || [[ ! -x $bin/$p ]]; then todo+=("$p"); fi
done
if (( check && ${#todo[@]} > 0 )); then
  die "not built: ${todo[*]} (no binary in $bin): run bash tests/peers/build.sh first (cold: about 13.5 minutes on 2 cores; then cached)"
fi
if (( ${#todo[@]} == 0 )); then
  log "cached: ${peers[*]} in $bin ($goversion, pins $key)"
  echo "$bin"
  exit 0
fi

log "building ${todo[*]} into $bin ($goversion, pins $key; GOMODCACHE=$GOMODCACHE GOCACHE=$GOCACHE)"
t_all=$(date +%s)
for p in "${todo[@]}"; do
  # build in a copy of the module dir, so that -mod=mod never rewrites the committed go.mod/go.sum
  src="$out/src/$p" lg="$out/build-$p.log"
  rm -rf "$src" && mkdir -p "$src"
  cp "$here/$(dir "$p")"/go.* "$src/"
  for f in "$here/$(dir "$p")"/*.go; do if [[ -f $f ]]; then cp "$f" "$src/"; fi; done
  t0=$(date +%s)
  log "building $p from $(context "$p") ..."
  (cd "$src" && CGO_ENABLED=0 nice -n 10 go build "${BUILD_FLAGS[@]}" \
    -ldflags="$LDFLAGS $(extra_ldflags "$p")" -o "$bin/.$p.tmp" "$(package "$p")") >"$lg" 2>&1 &
  build_pid=$!
  # a heartbeat while go (silent when it downloads or compiles) works: a quiet terminal looks hung
  n=0
  while kill -0 "$build_pid" 2>/dev/null; do
    sleep 1
    if (( ++n % heartbeat == 0 )) && kill -0 "$build_pid" 2>/dev/null; then
      log "still building $p: $(elapsed "$t0") so far"
    fi
  done
  status=0; wait "$build_pid" || status=$?
  if (( status != 0 )); then
    cat "$lg" >&2
    die "building $p from $(context "$p") failed after $(elapsed "$t0"); go said: $(grep -v '^go: downloading' "$lg" | tail -n 4 | tr '\n' ' ')"
  fi
  grep -v '^go: downloading' "$lg" >&2 || true
  if ! cmp -s "$src/go.mod" "$here/$(dir "$p")/go.mod" || ! cmp -s "$src/go.sum" "$here/$(dir "$p")/go.sum"; then
    log "warning: go had to change tests/peers/$(dir "$p")/go.mod or go.sum to build $p: run $script --regen $p and commit"
  fi
  mv -f "$bin/.$p.tmp" "$bin/$p"
  rm -rf "$src"
  log "built $p in $(elapsed "$t0") ($(du -h "$bin/$p" | cut -f1))"
done
rm -rf "$out/src"
log "built ${todo[*]} in $(elapsed "$t_all") total"
echo "$bin"
