#!/usr/bin/env bash
# Step 6: the build record /etc/k4w-release.json, {"box": <name>, "components": {<name>:
# <version>}} with exactly the profile's components (docs/internals.md). The testinfra box
# spec compares it with the profile.
#
# Env: K4W_BOX, K4W_RELEASE_JSON (computed from the profile by k4w/derive/step_env.py, so the record
# cannot drift from the profile; the Windows box writes the same record).
K4W_STEP="06-build-record"
set -Eeuo pipefail
trap 'echo "k4w ${K4W_STEP}: ${BASH_SOURCE[0]##*/} line ${LINENO}: \"${BASH_COMMAND}\" exited $?" >&2' ERR
K4W_LIB="${K4W_LIB:-$(dirname "${BASH_SOURCE[0]}")/../lib.sh}"
[[ -r $K4W_LIB ]] || { echo "k4w ${K4W_STEP}: library ${K4W_LIB} not found (Packer uploads guest/ubuntu/lib.sh there)" >&2; exit 1; }
# shellcheck source=../lib.sh
source "$K4W_LIB"

RECORD=/etc/k4w-release.json
# The exact shape the template renders: one object, a box name and name -> version strings.
SHAPE='^\{"box": "([A-Za-z0-9._-]+)", "components": \{("[A-Za-z0-9_-]+": "[^"\\]+"(, )?)*\}\}$'

k4w_require K4W_BOX K4W_RELEASE_JSON
k4w_distro >/dev/null
if [[ ! $K4W_RELEASE_JSON =~ $SHAPE ]]; then
    k4w_die "K4W_RELEASE_JSON is not {\"box\": ..., \"components\": {...}}: ${K4W_RELEASE_JSON}"
fi
[[ ${BASH_REMATCH[1]} == "$K4W_BOX" ]] || k4w_die "K4W_RELEASE_JSON names box ${BASH_REMATCH[1]}, not ${K4W_BOX}"

k4w_write_file "$RECORD" 0644 "$K4W_RELEASE_JSON"
k4w_log "build record ${RECORD}: ${K4W_RELEASE_JSON}"
