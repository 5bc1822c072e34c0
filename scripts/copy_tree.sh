#!/usr/bin/env bash
# Copies this checkout into DEST as git would commit it: tracked files and new untracked ones,
# not ignored ones (build outputs, the built extension, venvs), so that a build in DEST neither
# replaces nor reuses this checkout's own extension. DEST is emptied first.
# Usage: bash scripts/copy_tree.sh DEST   (scripts/sanitize.sh python, scripts/check_cuda_build.sh)
set -euo pipefail
dest=$(realpath -m "${1:?usage: copy_tree.sh DEST}")
cd "$(dirname "$0")/.."
rm -rf "$dest"
mkdir -p "$dest"
# A tracked file deleted in the working tree (its removal not yet committed) is left out.
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
  tar --null -T - -cf - | tar -xf - -C "$dest"
