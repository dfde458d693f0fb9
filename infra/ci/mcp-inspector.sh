#!/usr/bin/env bash
# The MCP Inspector's CLI (npm @modelcontextprotocol/inspector, pinned) for the tests that drive a
# real third-party MCP client against the gateway (tests/gateway/test_mcp_inspector.py).
#
#   infra/ci/mcp-inspector.sh        # prints the path of a command that runs the Inspector
#
# Installed once into .kswarm/cache/ (ignored by git; KSWARM_MCP_INSPECTOR_DIR moves it), then reused:
# nothing is downloaded when it is there. The Inspector 2.x needs Node >= 22.19; where the system's
# node is older (Debian bookworm has 20), Node itself comes from the npm registry too (the `node`
# package, pinned), through the same npm. The printed command is a wrapper that runs the Inspector
# with that node first on PATH. Exit 0 and the path on stdout, or non-zero and one line on stderr
# saying why (no npm, registry unreachable, install failed).
set -euo pipefail

INSPECTOR_VERSION="${KSWARM_MCP_INSPECTOR_VERSION:-2.12.0}"
NODE_VERSION="${KSWARM_MCP_INSPECTOR_NODE:-22.23.3}"
NODE_MIN="22.19.0"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PREFIX="${KSWARM_MCP_INSPECTOR_DIR:-$ROOT/.kswarm/cache/mcp-inspector-$INSPECTOR_VERSION}"
WRAPPER="$PREFIX/mcp-inspector"

fail() {
  echo "mcp-inspector: $*" >&2
  exit 1
}

# Every installed file, by path and size: a cache copied from elsewhere without some of its files
# (seen in CI: node_modules/atomically/dist/ gone, while --version still answered) is installed again.
files_manifest() {
  (cd "$1" && find node_modules -type f -printf '%p %s\n' | LC_ALL=C sort | sha256sum | cut -d' ' -f1)
}

# One installer at a time per cache dir: the suite's workers ask for the Inspector at once (pytest-xdist
# spreads one module's tests over several), and two installs into one staging dir delete each other's
# files (seen in CI: "npm install ... failed:" with the log already gone). The second waits, then finds
# the first one's install below.
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock 9

# Installed, whole and working (a cache copied from elsewhere, or half removed, is installed again).
if [[ -x "$WRAPPER" ]] && [[ -f "$PREFIX/.files" ]] && [[ "$(files_manifest "$PREFIX")" == "$(cat "$PREFIX/.files")" ]] \
  && [[ "$("$WRAPPER" --version 2>/dev/null)" == "$INSPECTOR_VERSION" ]]; then
  echo "$WRAPPER"
  exit 0
fi

command -v npm >/dev/null || fail "npm is not installed (apt-get install nodejs npm): cannot install the Inspector"
registry="$(npm config get registry 2>/dev/null || echo https://registry.npmjs.org/)"
npm view "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" version --fetch-timeout=20000 \
  --fetch-retries=1 >/dev/null 2>&1 || fail "the npm registry ($registry) does not answer for @modelcontextprotocol/inspector@$INSPECTOR_VERSION"

packages=("@modelcontextprotocol/inspector@$INSPECTOR_VERSION")
system_node="$(command -v node || true)"
# The system's node when it is new enough, else node from the registry (installed beside it; the
# wrapper finds it relative to itself, so the cache dir may move).
node_cmd="\$here/node_modules/node/bin/node"
if [[ -n "$system_node" ]] && [[ "$(printf '%s\n%s\n' "$NODE_MIN" "$("$system_node" --version | tr -d v)" | sort -V | head -1)" == "$NODE_MIN" ]]; then
  node_cmd="$system_node"
else
  packages+=("node@$NODE_VERSION")
fi

staging="$PREFIX.partial"
rm -rf "$staging"
mkdir -p "$staging"
log="$staging/npm-install.log"
if ! npm install --prefix "$staging" --no-audit --no-fund --no-save --fetch-timeout=60000 \
  "${packages[@]}" >"$log" 2>&1; then
  fail "npm install ${packages[*]} failed: $( (grep -i 'err' "$log" || grep -v '^\s*$' "$log" || echo 'npm printed nothing') | tail -3 | tr '\n' ' ')"
fi
[[ -f "$staging/node_modules/@modelcontextprotocol/inspector/package.json" ]] \
  || fail "npm install ${packages[*]} left no @modelcontextprotocol/inspector in $staging"

launcher="node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
cat >"$staging/mcp-inspector" <<EOF
#!/usr/bin/env bash
# The MCP Inspector $INSPECTOR_VERSION on its node (written by infra/ci/mcp-inspector.sh).
here="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
node="$node_cmd"
export PATH="\$(dirname "\$node"):\$PATH"
exec "\$node" "\$here/$launcher" "\$@"
EOF
chmod +x "$staging/mcp-inspector"
files_manifest "$staging" >"$staging/.files"
rm -rf "$PREFIX"
mv "$staging" "$PREFIX"  # all or nothing: a half-done install is never taken for a finished one
echo "$WRAPPER"
