# Sourced by the reference tests that need packages from PyPI: make_venv DIR PINS [PIP
# ARGS...] makes a virtual environment over Debian's python3 with its site packages
# (python3-torch, h5py, numpy) in DIR and pip-installs the pinned requirements file PINS
# into it, once: it is complete only when its stamp (a copy of PINS) is written, so an
# interrupted or failed install is made again next time, and it is reused while the pins
# are unchanged. When it cannot be made (no python3-venv, PyPI out of reach, an install
# that fails) the test is skipped -- exit 77, with the reason -- never passed. Needs $work
# (a scratch directory for the logs).
make_venv() {
  local venv=$1 pins=$2
  shift 2
  cmp -s "$pins" "$venv/.flexsp-pins" 2>/dev/null && return 0
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv" >"$work/venv.log" 2>&1 ||
    { cat "$work/venv.log"; echo "SKIPPED: cannot make a virtual environment (is python3-venv installed?)"; exit 77; }
  echo "installing $(grep -v '^#' "$pins" | cut -d= -f1 | tr '\n' ' ')into $venv (pinned: $pins)"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --no-input --timeout 20 \
      --retries 2 "$@" -r "$pins" >"$work/pip.log" 2>&1; then
    tail -5 "$work/pip.log"
    rm -rf "$venv"
    echo "SKIPPED: pip could not install $pins (PyPI out of reach, or the install failed; see above)"
    exit 77
  fi
  cp "$pins" "$venv/.flexsp-pins"
}
