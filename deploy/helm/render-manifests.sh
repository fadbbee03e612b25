#!/usr/bin/env bash
# Renders deploy/*.yaml from the chart (release `haptic`, namespace `haptic-system`, values
# deploy/helm/manifests-values.yaml), one file per template:
#   deploy/helm/render-manifests.sh [OUT_DIR]      (default: deploy/)
# helm: $HELM, else $HAPTIC_PEERS_BIN/helm, else `helm` on PATH (tests/peers/build.sh builds it).
# tests/integration/runtime/helm.rs runs this into a temporary directory and compares.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$here/..}
helm=${HELM:-${HAPTIC_PEERS_BIN:+$HAPTIC_PEERS_BIN/helm}}
helm=${helm:-helm}
rendered=$("$helm" template haptic "$here/haptic" --namespace haptic-system \
  -f "$here/manifests-values.yaml")
mkdir -p "$out"
printf '%s\n' "$rendered" | awk -v out="$out" '
  function flush() {
    if (file != "") {
      sub(/\n+$/, "\n", body)
      printf "%s", body > (out "/" file)
      close(out "/" file)
    }
    file = ""; body = ""
  }
  /^---$/ { flush(); next }
  /^# Source: haptic\/templates\// {
    file = substr($0, length("# Source: haptic/templates/") + 1)
    body = "# Generated from deploy/helm/haptic by deploy/helm/render-manifests.sh: edit the chart, then run it.\n"
    next
  }
  { if (file != "") body = body $0 "\n" }
  END { flush() }
'
