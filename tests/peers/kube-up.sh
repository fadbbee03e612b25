#!/usr/bin/env bash
# Starts a real etcd + kube-apiserver on loopback only (the recipe of tests/peers/README.md):
#   tests/peers/kube-up.sh DIR      start; the LAST line of stdout is DIR/kubeconfig
#   tests/peers/kube-up.sh --down DIR
# DIR holds everything (etcd data, certs, keys, token file, logs, pids, env). Binaries come from
# tests/peers/build.sh (run first, or give HAPTIC_PEERS_BIN). DIR/env has KUBE_SERVER, KUBE_TOKEN
# (an admin in system:masters), ETCD_URL and the pids. No controller-manager runs: see the README
# for what that leaves out.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf 'kube-up: %s\n' "$*" >&2; }
die() { printf 'kube-up: error: %s\n' "$*" >&2; exit 1; }

if [[ ${1:-} == --down ]]; then
  d=${2:?usage: kube-up.sh --down DIR}
  for p in apiserver etcd; do
    if [[ -f $d/$p.pid ]]; then
      pid=$(cat "$d/$p.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$d/$p.pid"
    fi
  done
  exit 0
fi
d=${1:?usage: kube-up.sh DIR}
mkdir -p "$d" && d=$(cd "$d" && pwd)
bin=${HAPTIC_PEERS_BIN:-$("$here/build.sh" kube-apiserver etcd | tail -n 1)}
for b in etcd kube-apiserver; do [[ -x $bin/$b ]] || die "$bin/$b missing: run tests/peers/build.sh"; done

# three free loopback ports (etcd client, etcd peer, apiserver)
read -r ec ep ap < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
mkdir -p "$d/etcd" "$d/certs"
[[ -f $d/sa.key ]] || openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
token=$(openssl rand -hex 16)
echo "$token,admin,admin-uid,system:masters" > "$d/tokens.csv"
chmod 600 "$d/tokens.csv" "$d/sa.key"

t0=$(date +%s%N)
"$bin/etcd" --name peers --data-dir "$d/etcd" \
  --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
  --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
  --initial-cluster "peers=http://127.0.0.1:$ep" --listen-metrics-urls= \
  >"$d/etcd.log" 2>&1 &
echo $! > "$d/etcd.pid"
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$ec/health" | grep -q '"health":"true"' && break
  kill -0 "$(cat "$d/etcd.pid")" 2>/dev/null || die "etcd exited: see $d/etcd.log"
  sleep 0.05
done
t1=$(date +%s%N)

"$bin/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ec" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$ap" \
  --endpoint-reconciler-type=none \
  --cert-dir="$d/certs" \
  --authorization-mode=Node,RBAC \
  --token-auth-file="$d/tokens.csv" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$d/sa.pub" --service-account-signing-key-file="$d/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --disable-admission-plugins=ServiceAccount \
  >"$d/apiserver.log" 2>&1 &
echo $! > "$d/apiserver.pid"
for _ in $(seq 1200); do
  [[ $(curl -sk -H "Authorization: Bearer $token" "https://127.0.0.1:$ap/readyz" 2>/dev/null) == ok ]] && break
  kill -0 "$(cat "$d/apiserver.pid")" 2>/dev/null || die "kube-apiserver exited: see $d/apiserver.log"
  sleep 0.05
done
[[ $(curl -sk -H "Authorization: Bearer $token" "https://127.0.0.1:$ap/readyz") == ok ]] \
  || die "kube-apiserver not ready after 60s: see $d/apiserver.log"
t2=$(date +%s%N)
log "etcd ready in $(( (t1 - t0) / 1000000 )) ms, kube-apiserver ready $(( (t2 - t1) / 1000000 )) ms later (127.0.0.1:$ap)"

cat > "$d/env" <<EOF
KUBE_SERVER=https://127.0.0.1:$ap
KUBE_TOKEN=$token
ETCD_URL=http://127.0.0.1:$ec
ETCD_PID=$(cat "$d/etcd.pid")
APISERVER_PID=$(cat "$d/apiserver.pid")
EOF
cat > "$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: peers
    cluster:
      server: https://127.0.0.1:$ap
      certificate-authority: $d/certs/apiserver.crt
users:
  - name: admin
    user:
      token: $token
contexts:
  - name: peers
    context: {cluster: peers, user: admin, namespace: default}
current-context: peers
EOF
chmod 600 "$d/kubeconfig"
echo "$d/kubeconfig"
