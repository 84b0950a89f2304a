#!/usr/bin/env bash
# Install what tests/test_slurm.py needs for its throwaway single-node Slurm: Debian's slurmctld,
# slurmd, slurm-client and munge (8 small packages; the slurm-wlm metapackage is not needed).
# Idempotent: does nothing when they are already installed. Starts no daemon (the test does).
set -euo pipefail

packages=(slurmctld slurmd slurm-client munge)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "slurm-setup: ${packages[*]} already installed"
    exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "slurm-setup: needs root (or sudo) to install ${missing[*]}" >&2; exit 1; }
    as_root=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends "${packages[@]}"
echo "slurm-setup: installed ${missing[*]}"
