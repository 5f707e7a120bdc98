# What the benchmark scripts share; sourced, not run.

# The median of the numbers on standard input, one a line.
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Connections established now to local port $1, counted at the listener
# (/proc/net/tcp).
connections_to() {
    awk -v port="$(printf '%04X' "$1")" 'NR > 1 { split($2, local, ":"); if (local[2] == port && $4 == "01") n++ } END { print n + 0 }' /proc/net/tcp
}

# The test environment (target/test-venv, made with torch and maturin where
# missing) with the package as `pip install ./python` builds it (Cargo.toml's
# wheel profile); its path in $venv.
install_wheel_in_test_venv() {
    venv=target/test-venv
    if ! "$venv/bin/python" -c 'import maturin, torch' >/dev/null 2>&1; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q maturin torch numpy
    fi
    PATH="$PWD/$venv/bin:$PATH" "$venv/bin/pip" install -q --no-build-isolation --no-deps \
        --force-reinstall ./python
}
