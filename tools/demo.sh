#!/usr/bin/env bash
# The README's main job: install what is missing, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
exec bash tools/demo-run.sh
