# Sourced by the entry scripts: make sure uv exists and the locked venv is in sync.
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv
  export PATH="$HOME/.local/bin:$PATH"
fi
uv sync --locked --quiet
