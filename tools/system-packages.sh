#!/usr/bin/env bash
# The Debian packages `make run` and `make test` need. As root, installs the missing ones
# (once: nothing is installed when all are present); otherwise prints the one apt-get line
# to run and fails.
set -euo pipefail

python=${1:-python3}
missing=()
command -v cmake >/dev/null || missing+=(cmake)            # llama-cpp-python builds from source
command -v g++ >/dev/null || missing+=(g++)
command -v espeak-ng >/dev/null || missing+=(espeak-ng)    # speech.engine = "espeak-ng" and its tests
dpkg -s libusb-1.0-0 >/dev/null 2>&1 || missing+=(libusb-1.0-0)   # pyrealsense2 loads it
command -v chromium >/dev/null || missing+=(chromium)      # the operator page's browser test (Playwright)
for lib in libgl1 libglib2.0-0 libx11-6; do                      # opencv-python's cv2 loads them
  dpkg -s "$lib" >/dev/null 2>&1 || missing+=("$lib")
done
"$python" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)

((${#missing[@]})) || exit 0
if ! command -v apt-get >/dev/null; then
  echo "onboard: needs ${missing[*]} (Debian package names); install them with your package manager" >&2
  exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "onboard: run once as root: apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "onboard setup: installing Debian packages: ${missing[*]} (about 1-2 min)"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp -t onboard-apt.XXXXXX.log)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
  >"$log" 2>&1; then
  echo "onboard setup: apt-get failed; the last lines of $log:" >&2
  tail -n 25 "$log" >&2
  exit 1
fi
rm -f "$log"
