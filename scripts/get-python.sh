#!/usr/bin/env bash
# Fetch a real CPython 3.15 (default; or 3.14: `get-python.sh 3.14`) from Debian sid's binary packages and
# unpack it, with sid's own libc and the libraries it links, under /opt/python<V> (FSGUARD_PYTHON_ROOT):
# nothing is installed into the system. The result is /opt/python<V>/bin/python<V>, a small script that runs
# sid's interpreter through sid's dynamic loader (--library-path), so it behaves as `python<V>` (and
# `python<V> -m venv` works). tests/test_versions.py finds it there.
#
# Steps (root; about 1-2 minutes on a good link, most of it `apt-get update` of sid's lists):
#   1. a separate apt configuration (sources: sid main) under $ROOT/.apt, `apt-get update` of it alone;
#   2. `apt-get download` of the interpreter, its standard library and the shared libraries it needs;
#   3. `dpkg -x` of each .deb into $ROOT/sysroot;
#   4. $ROOT/bin/python<V>: exec sysroot's ld-linux --library-path <sysroot libs> sysroot/usr/bin/python<V>.
set -euo pipefail
V="${1:-3.15}"
ROOT="${FSGUARD_PYTHON_ROOT:-/opt/python$V}"
APT="$ROOT/.apt"
SYS="$ROOT/sysroot"
ARCH="$(dpkg --print-architecture)"
TRIPLE="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"

if [ -x "$ROOT/bin/python$V" ] && "$ROOT/bin/python$V" -c pass 2>/dev/null; then
    echo "$ROOT/bin/python$V"
    exit 0
fi
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$APT/debs" "$SYS" "$ROOT/bin"
cat >"$APT/sources.list" <<SRC
deb [arch=$ARCH signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
SRC
: >"$APT/status"
OPTS=(-o "Dir::Etc::SourceList=$APT/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
      -o "Dir::State::Lists=$APT/lists" -o "Dir::State::Status=$APT/status" -o "Dir::Cache=$APT/cache"
      -o "APT::Architecture=$ARCH" -o "APT::Architectures=$ARCH" -o "Debug::NoLocking=1")
apt-get "${OPTS[@]}" -qq update

# The interpreter, its standard library, and what they link (sid's names: t64 libraries included).
WANT=(python$V-minimal libpython$V-minimal libpython$V-stdlib libc6 libgcc-s1 libexpat1 zlib1g libffi8
      libssl3t64 libbz2-1.0 liblzma5 libzstd1 libmpdec4 libsqlite3-0 libuuid1 libncursesw6 libtinfo6
      libreadline8t64 libcrypt1 libdb5.3t64 libgdbm6t64 libnsl2 libtirpc3t64 libgssapi-krb5-2 libkrb5-3
      libk5crypto3 libcom-err2 libkrb5support0 libkeyutils1 media-types tzdata
      python$V-venv python3-pip-whl python3-setuptools-whl)
cd "$APT/debs"
for pkg in "${WANT[@]}"; do
    # a name sid no longer has (renamed libraries) is skipped: the interpreter's own check below decides
    apt-get "${OPTS[@]}" -qq download "$pkg" 2>/dev/null || echo "get-python.sh: skipped $pkg" >&2
done
for deb in ./*.deb; do dpkg -x "$deb" "$SYS"; done
# ensurepip (`python -m venv` with pip) takes sid's pip wheel from this copy, not the host's /usr/share.
sed -i "s|'WHEEL_PKG_DIR': '/usr/share/python-wheels/'|'WHEEL_PKG_DIR': '$SYS/usr/share/python-wheels/'|" \
    "$SYS"/usr/lib/python"$V"/_sysconfigdata_*.py

LD="$(find "$SYS" -name 'ld-linux*.so.*' -print -quit)"
LIBS="$SYS/usr/lib/$TRIPLE"
# $ROOT is the interpreter's prefix: bin/python<V> (the wrapper) beside lib/python<V> (sid's standard library),
# so that sys.prefix, venvs made from it (their pyvenv.cfg's home) and sys.executable all point at the wrapper.
mkdir -p "$ROOT/lib"
ln -sfn "$SYS/usr/lib/python$V" "$ROOT/lib/python$V"
cat >"$ROOT/bin/python$V" <<WRAP
#!/bin/sh
# Debian sid's CPython $V, run with sid's own libc (see scripts/get-python.sh).
exec "$LD" --library-path "$LIBS" --argv0 "\$0" "$SYS/usr/bin/python$V" "\$@"
WRAP
chmod +x "$ROOT/bin/python$V"
# Debian compiles the standard library's bytecode when it installs the package (py3compile); unpacked, it has
# none, and every start would compile what it imports: compile it once here.
"$ROOT/bin/python$V" -m compileall -q -j0 -x 'lib2to3|test|idlelib|turtledemo' "$ROOT/lib/python$V" >/dev/null || true
"$ROOT/bin/python$V" -c 'import sys, ssl, sqlite3, zlib, ensurepip; print(sys.version)' >&2
echo "$ROOT/bin/python$V"
