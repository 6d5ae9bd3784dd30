#!/usr/bin/env bash
# Build the Jupyter Book site offline, warnings as errors: scripts/build_book.sh
#
# 1. npm installs the pinned browser scripts (book/package.json + package-lock.json) and copies
#    the three the pages need into book/vendor/ (served by the book itself, never from a CDN);
# 2. the claims ledger page is generated from notebooks/claims/*.json (what the cells measured);
# 3. jupyter-book renders the committed, already-executed notebooks (no execution).
set -euo pipefail
cd "$(dirname "$0")/.."
# npm needs no Python: it installs while bootstrap sets up .venv (on a fresh clone both download)
(cd book && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error) &
npm_pid=$!
scripts/bootstrap.sh "${EXTRAS:-test,book}"
wait "$npm_pid"
rm -rf book/vendor && mkdir -p book/vendor/widgets book/vendor/mathjax/output/chtml/fonts
cp book/node_modules/requirejs/require.js book/vendor/require.js
widgets=book/node_modules/@jupyter-widgets/html-manager/dist
cp "$widgets"/embed-amd.js book/vendor/widgets/
cp "$widgets"/*.woff "$widgets"/*.woff2 "$widgets"/*.ttf "$widgets"/*.eot "$widgets"/*.svg \
   book/vendor/widgets/
cp book/node_modules/mathjax/es5/tex-mml-chtml.js book/vendor/mathjax/
cp -r book/node_modules/mathjax/es5/output/chtml/fonts/woff-v2 \
   book/vendor/mathjax/output/chtml/fonts/

.venv/bin/python -c "from ppdit.teaching.claims import ledger_markdown; \
open('book/claims.md', 'w').write(ledger_markdown())"
rm -rf book/_build
.venv/bin/jupyter-book build book -W --keep-going
echo "book: book/_build/html/index.html"
