# The deploy records: the checkout's ($1/.git/remote-deploy.json), then the venv's ($2/remote-venv.json),
# one per line; `null` for one that is missing.
cat "$1/.git/remote-deploy.json" 2>/dev/null || echo null
cat "$2/remote-venv.json" 2>/dev/null || echo null
