#!/usr/bin/env bash
# Builds rdmatool_VERSION_ARCH.deb with dpkg-deb from what packaging/ holds
# and what the static binary generates (man pages, shell completions).
#   packaging/deb/build.sh OUTDIR [GIT_DESCRIBE]
# The Debian version comes from `git describe --tags --always --dirty`
# (see debversion below). Run as any user: fakeroot makes the files root's.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR [GIT_DESCRIBE]}
top=$(cd "$(dirname "$0")/../.." && pwd)
describe=${2:-$(git -C "$top" describe --tags --always --dirty 2>/dev/null || echo dev)}
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
arch=$(dpkg --print-architecture)

# debversion turns a git description into a Debian version that sorts the
# way the history does: v1.2.0 -> 1.2.0, v1.2.0-5-gabc -> 1.2.0+git5.abc,
# a tree without tags (abc1234) -> 0~git.abc1234, -dirty -> +dirty.
debversion() {
	local d=$1 v suffix=
	if [[ $d == *-dirty ]]; then d=${d%-dirty}; suffix=+dirty; fi
	if [[ $d =~ ^[0-9a-f]{7,40}$ ]]; then
		v="0~git.$d"
	elif [[ $d =~ ^v?([0-9][0-9A-Za-z.~+]*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
		v="${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"
	elif [[ $d =~ ^v?([0-9][0-9A-Za-z.~+]*)$ ]]; then
		v=${BASH_REMATCH[1]}
	else
		v="0~$(printf '%s' "$d" | tr -c 'A-Za-z0-9.+~\n' '.')"
	fi
	printf '%s%s\n' "$v" "$suffix"
}
version=$(debversion "$describe")

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
install -m 0644 "$top/packaging/deb/copyright" "$root/usr/share/doc/rdmatool/copyright"
{
	printf 'rdmatool (%s) unstable; urgency=medium\n\n' "$version"
	printf '  * Built from git %s.\n\n' "$describe"
	printf ' -- rdmatool developers <rdmatool@users.noreply.github.com>  %s\n' \
		"$(date -R -u -d "@$(git -C "$top" log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n >"$root/usr/share/doc/rdmatool/changelog.gz"

install -m 0755 "$top/packaging/deb/postinst" "$top/packaging/deb/prerm" "$top/packaging/deb/postrm" "$root/DEBIAN/"
printf '/etc/rdmatool/agent.yaml\n/etc/rdmatool/names.conf.example\n' >"$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" \
	"$top/packaging/deb/control" >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/conffiles" "$root/DEBIAN/control" "$root/DEBIAN/md5sums"

mkdir -p "$out"
deb=$out/rdmatool_${version}_${arch}.deb
fakeroot dpkg-deb --build -Zxz "$root" "$deb" >/dev/null
echo "$deb"
