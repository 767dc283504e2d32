#!/bin/sh
# CTest entry (node_client): `npm test` in clients/node against the tensord binary given as $1.
# Exits 77 (CTest's skip code here) with the reason when node, npm or the npm dependencies are
# missing (scripts/setup.sh installs nodejs and npm and runs `npm ci`).
cd "$(dirname "$0")/.." || exit 1
if ! command -v node >/dev/null 2>&1; then
  echo "skip: node is not installed (scripts/setup.sh installs nodejs)"; exit 77
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "skip: npm is not installed (scripts/setup.sh installs npm)"; exit 77
fi
if [ ! -d node_modules/@grpc/grpc-js ] || [ ! -d node_modules/@grpc/proto-loader ]; then
  echo "skip: clients/node/node_modules is missing (run \`npm ci\` in clients/node)"; exit 77
fi
TENSORD_BIN="$1" exec npm test --silent
