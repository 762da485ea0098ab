#!/usr/bin/env bash
# Builds rdmatool_VERSION_ARCH.deb with dpkg-deb from what packaging/ holds
# and what the static binary generates (man pages, shell completions).
#   packaging/deb/build.sh OUTDIR [GIT_DESCRIBE]
# The Debian version comes from `git describe --tags --always --dirty`
# (debversion.sh). Run as any user: dpkg-deb --root-owner-group makes the
# files root's.
#
# Two builds of one commit give the same bytes (make test-deb checks it):
# SOURCE_DATE_EPOCH is the commit's time (or what the caller exports) and
# dates the changelog, the man pages and every file's mtime, which
# dpkg-deb also uses for the archive's own dates; files have fixed modes
# whatever the umask; gzip -n stores no name or time; dpkg-deb sorts the
# files and compresses on one thread; the Go binary is built with
# -trimpath -buildvcs=false.
set -euo pipefail
umask 022

out=${1:?usage: build.sh OUTDIR [GIT_DESCRIBE]}
top=$(cd "$(dirname "$0")/../.." && pwd)
describe=${2:-$(git -C "$top" describe --tags --always --dirty 2>/dev/null || echo dev)}
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
arch=$(dpkg --print-architecture)

version=$("$top/packaging/deb/debversion.sh" "$top" "$describe")
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/DEBIAN" "$root/usr/sbin" "$root/etc/rdmatool" \
	"$root/lib/systemd/system" "$root/lib/udev/rules.d" \
	"$root/usr/share/man/man8" "$root/usr/share/doc/rdmatool/examples" \
	"$root/usr/share/bash-completion/completions" \
	"$root/usr/share/zsh/vendor-completions" \
	"$root/usr/share/fish/vendor_completions.d" \
	"$root/usr/share/lintian/overrides"

# The binary: static (no libc: it runs on any distribution release), no
# build paths, no debug sections (Debian ships those in -dbgsym packages).
(cd "$top" && CGO_ENABLED=0 "$go" build -trimpath -buildvcs=false \
	-ldflags "-s -w -X main.version=$describe" -o "$root/usr/sbin/rdmatool" ./cmd/rdmatool)
bin=$root/usr/sbin/rdmatool
# What the udev rule runs: rename udev in a program that starts fast.
install -d "$root/lib/udev"
(cd "$top" && CGO_ENABLED=0 "$go" build -trimpath -buildvcs=false \
	-ldflags "-s -w" -o "$root/lib/udev/rdmatool-udev-rename" ./cmd/rdmatool-udev-rename)

"$bin" docs man "$stage/man"
for f in "$stage"/man/*.8; do
	gzip -9n <"$f" >"$root/usr/share/man/man8/$(basename "$f").gz"
done
"$bin" completion bash >"$root/usr/share/bash-completion/completions/rdmatool"
"$bin" completion zsh >"$root/usr/share/zsh/vendor-completions/_rdmatool"
"$bin" completion fish >"$root/usr/share/fish/vendor_completions.d/rdmatool.fish"

# Debian 12 keeps units and udev rules in /lib (the /usr merge moves them
# in Debian 13; dpkg must not see one file under two names meanwhile).
install -m 0644 "$top/packaging/systemd/rdmatool-agent.service" "$root/lib/systemd/system/"
install -m 0644 "$top/packaging/udev/70-rdmatool-naming.rules" "$root/lib/udev/rules.d/"
install -m 0644 "$top/packaging/rdmatool/agent.yaml" "$root/etc/rdmatool/agent.yaml"
install -m 0644 "$top/packaging/rdmatool/names.conf.example" "$root/etc/rdmatool/names.conf.example"
install -m 0644 "$top/packaging/README.md" "$root/usr/share/doc/rdmatool/README.md"
install -m 0644 "$top/packaging/systemd/reset.conf.example" "$root/usr/share/doc/rdmatool/examples/reset.conf"
install -m 0644 "$top/packaging/udev/README.md" "$root/usr/share/doc/rdmatool/README.udev.md"
install -m 0644 "$top/packaging/deb/lintian-overrides" "$root/usr/share/lintian/overrides/rdmatool"
# rdmatool's licenses and those of everything compiled into the binary,
# from its build information (packaging/cmd/copyright).
(cd "$top" && "$go" run ./packaging/cmd/copyright -modcache "$("$go" env GOMODCACHE)" \
	-goroot "$("$go" env GOROOT)" "$bin") >"$root/usr/share/doc/rdmatool/copyright"
{
	printf 'rdmatool (%s) unstable; urgency=medium\n\n' "$version"
	printf '  * Built from git %s.\n\n' "$describe"
	printf ' -- rdmatool developers <rdmatool@users.noreply.github.com>  %s\n' \
		"$(date -R -u -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$root/usr/share/doc/rdmatool/changelog.gz"

install -m 0755 "$top/packaging/deb/postinst" "$top/packaging/deb/prerm" "$top/packaging/deb/postrm" "$root/DEBIAN/"
printf '/etc/rdmatool/agent.yaml\n/etc/rdmatool/names.conf.example\n' >"$root/DEBIAN/conffiles"
# Installed-Size as dpkg-gencontrol counts it: each file's size in KiB,
# rounded up, and 1 for each directory (du would count the file system's
# blocks, which differ between machines).
size=$(cd "$root" && find . -path ./DEBIAN -prune -o \( -type f -printf '%s\n' -o -printf '1024\n' \) |
	awk '{ n += int(($1 + 1023) / 1024) } END { print n }')
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
	"$top/packaging/deb/control" >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/conffiles" "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
# Every mtime is the commit's (the files are all made by this build).
find "$root" -exec touch --no-dereference --date="@$SOURCE_DATE_EPOCH" {} +

mkdir -p "$out"
deb=$out/rdmatool_${version}_${arch}.deb
dpkg-deb --root-owner-group --build -Zxz --threads-max=1 "$root" "$deb" >/dev/null
echo "$deb"
