# Sourced by the entry scripts: make sure uv exists and the locked venv is in sync.
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --quiet --user uv || python3 -m pip install --quiet uv
  export PATH="$HOME/.local/bin:$PATH"
fi
# The product and the test kit (testkit/, a workspace member the dev group installs), editable.
uv sync --locked --quiet
# The rig and the tests start hundreds of short-lived Python processes (services, fake
# kernels, the coordinator): with PYTHONDONTWRITEBYTECODE set (some CI images set it)
# each would compile every module it imports again, about 0.6 s per start here. They
# write bytecode (to the ignored __pycache__ directories) and read it back.
unset PYTHONDONTWRITEBYTECODE
