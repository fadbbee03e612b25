#!/bin/sh
# reload_cmd/restart_cmd for the Dataplane API in front of an HAProxy master-worker process:
#   haproxy-reload.sh MASTER_SOCKET
# dataplaneapi v3 reloads through the master socket by itself only for HAProxy >= 2.7 (whose master
# CLI `reload` answers Success=1/0); with Debian's 2.6 it falls back to this command. HAProxy 2.6's
# `reload` is asynchronous and answers nothing, so this waits for the master's reload counter to move
# and fails (exit 1, message on stderr, which dataplaneapi keeps as the reload's response) when the
# master then reports failed reloads (2.6 counts failures since the last good reload: a good reload
# resets it to 0). Needs socat.
set -eu
sock=${1:?usage: haproxy-reload.sh MASTER_SOCKET}
# master line of `show proc`: <pid> master <reloads> [failed: <n>] <uptime> <version>
state() { echo "show proc" | socat -t 2 - "UNIX-CONNECT:$sock" 2>/dev/null | awk '$2 == "master" {gsub(/]/, "", $5); print $3, $5}'; }
before=$(state)
[ -n "$before" ] || { echo "haproxy-reload: no answer from the master socket $sock" >&2; exit 1; }
echo reload | socat -t 2 - "UNIX-CONNECT:$sock" >/dev/null 2>&1 || true
i=0
while [ $i -lt 100 ]; do # 10 s
  now=$(state)
  if [ -n "$now" ] && [ "${now%% *}" != "${before%% *}" ]; then
    if [ "${now#* }" != 0 ]; then
      echo "haproxy-reload: the reload failed (master: reloads/failed $before -> $now); the old workers keep running" >&2
      exit 1
    fi
    echo "reloaded (master: reloads/failed $before -> $now)"
    exit 0
  fi
  i=$((i + 1)); sleep 0.1
done
echo "haproxy-reload: the master did not report a reload within 10s (reloads/failed still $before)" >&2
exit 1
