#!/usr/bin/env bash
# Installs the .deb into a Debian bookworm root and checks it as an
# operator would: files where the unit, the udev rule and the docs say,
# `systemd-analyze verify` on the unit, then remove (conffiles stay) and
# purge (dpkg's files gone, files the operator made stay).
#   packaging/deb/install-test.sh CACHEDIR rdmatool_*.deb
# The root is made once by debootstrap (minbase plus systemd and procps) from
# the Debian archive the host's apt uses, and kept as CACHEDIR/bookworm.tar.
set -euo pipefail
cache=${1:?usage: install-test.sh CACHEDIR DEB}
deb=$(realpath "${2:?usage: install-test.sh CACHEDIR DEB}")
mkdir -p "$cache"
if [ ! -s "$cache/bookworm.tar" ]; then
	mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
		awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
	tmp=$(mktemp -d)
	debootstrap --variant=minbase --include=systemd,procps bookworm "$tmp" "$mirror" >"$cache/debootstrap.log"
	tar -C "$tmp" -cf "$cache/bookworm.tar.part" .
	mv "$cache/bookworm.tar.part" "$cache/bookworm.tar"
	rm -rf "$tmp"
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
tar -C "$root" -xf "$cache/bookworm.tar"
cp "$deb" "$root/tmp/rdmatool.deb"
inroot() { chroot "$root" "$@"; }
fail() { echo "install-test: $*" >&2; exit 1; }

inroot dpkg -i /tmp/rdmatool.deb >/dev/null
inroot dpkg -s rdmatool | grep -q '^Status: install ok installed' || fail "not installed"
# Where the unit (ExecStart, Documentation), the udev rule (RUN) and
# packaging/README.md say the files are.
for f in /usr/sbin/rdmatool /lib/udev/rdmatool-udev-rename /lib/systemd/system/rdmatool-agent.service \
	/lib/udev/rules.d/70-rdmatool-naming.rules /etc/rdmatool/agent.yaml \
	/etc/rdmatool/names.conf.example /usr/share/man/man8/rdmatool-agent.8.gz \
	/usr/share/man/man8/rdmatool.8.gz /usr/share/bash-completion/completions/rdmatool \
	/usr/share/zsh/vendor-completions/_rdmatool /usr/share/fish/vendor_completions.d/rdmatool.fish \
	/usr/share/doc/rdmatool/copyright /usr/share/doc/rdmatool/examples/reset.conf; do
	[ -s "$root$f" ] || fail "$f missing"
done
exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$root/lib/systemd/system/rdmatool-agent.service")
[ -x "$root$exec_start" ] || fail "ExecStart $exec_start not executable"
run=$(sed -n 's/.*RUN+="\([^ ]*\).*/\1/p' "$root/lib/udev/rules.d/70-rdmatool-naming.rules")
[ -x "$root$run" ] || fail "udev RUN $run not executable"
inroot /usr/sbin/rdmatool --version | grep -q '^rdmatool ' || fail "rdmatool --version"
# Nothing enabled or started by the package.
[ -z "$(find "$root/etc/systemd/system" -name 'rdmatool*')" ] || fail "the package enabled the unit"
# --man=no: minbase has no man(1); the man page was checked above. verify
# exits 0 on a directive it cannot parse, so any output fails.
out=$(inroot systemd-analyze verify --man=no /lib/systemd/system/rdmatool-agent.service 2>&1) ||
	fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
# The reset drop-in, installed as its comment says, verifies with the unit.
dropin=/etc/systemd/system/rdmatool-agent.service.d
mkdir -p "$root$dropin"
cp "$root/usr/share/doc/rdmatool/examples/reset.conf" "$root$dropin/reset.conf"
out=$(inroot systemd-analyze verify --man=no /lib/systemd/system/rdmatool-agent.service 2>&1) ||
	fail "systemd-analyze verify with the reset drop-in: $out"
[ -z "$out" ] || fail "systemd-analyze verify with the reset drop-in: $out"
rm -r "$root$dropin"

# The operator edits a conffile, writes a names map and enables the agent.
echo '# changed' >>"$root/etc/rdmatool/agent.yaml"
echo '0002:c903:00a1:b2c3 fab0-hca0' >"$root/etc/rdmatool/names.conf"
inroot systemctl enable rdmatool-agent.service >/dev/null 2>&1
inroot dpkg -r rdmatool >/dev/null
[ ! -e "$root/usr/sbin/rdmatool" ] || fail "remove left the binary"
grep -q '^# changed' "$root/etc/rdmatool/agent.yaml" || fail "remove lost the changed conffile"
inroot dpkg -P rdmatool >/dev/null 2>&1
for f in /etc/rdmatool/agent.yaml /etc/rdmatool/names.conf.example \
	/etc/systemd/system/multi-user.target.wants/rdmatool-agent.service \
	/lib/systemd/system/rdmatool-agent.service /usr/share/doc/rdmatool; do
	[ ! -e "$root$f" ] || fail "purge left $f"
done
[ -s "$root/etc/rdmatool/names.conf" ] || fail "purge removed the operator's names.conf"
left=$(inroot dpkg -L rdmatool 2>/dev/null || true)
[ -z "$left" ] || fail "dpkg still lists files: $left"
echo "install-test: $(basename "$deb") installs, verifies, removes and purges in bookworm"
