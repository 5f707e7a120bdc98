#!/usr/bin/env bash
# Refreshes the ECharts build that report.html inlines
# (coordinator/assets/echarts/): Apache ECharts from the npm registry, its
# full minified build with its licence files. The file is committed, so
# building rankscope needs neither npm nor the network; run this only to
# move to another version, then update ECHARTS_VERSION below and the
# checksum it prints into coordinator/assets/echarts/SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/.."
ECHARTS_VERSION=5.6.0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "echarts@$ECHARTS_VERSION" >/dev/null && tar xzf echarts-*.tgz)
dest=coordinator/assets/echarts
cp "$work/package/dist/echarts.min.js" "$work/package/LICENSE" "$work/package/NOTICE" \
    "$work/package/licenses/LICENSE-d3" "$dest/"
(cd "$dest" && sha256sum echarts.min.js)
