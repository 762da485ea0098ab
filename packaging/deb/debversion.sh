#!/usr/bin/env bash
# Prints the Debian version of a build of REPO described as GIT_DESCRIBE
# (`git describe --tags --always --dirty`, as the Makefile's VERSION):
#   packaging/deb/debversion.sh REPO GIT_DESCRIBE
# Versions sort the way the history does, so apt sees each later commit as
# an upgrade:
#   v1.2.0                 -> 1.2.0
#   v1.2.0-5-gabc1234      -> 1.2.0+git5.abc1234 (5 commits after the tag)
#   abc1234 (no tag yet)   -> 0~git42.abc1234 (42 commits in its history)
#   ...-dirty              -> ...+dirty (after its commit's clean build)
# The counts grow along the history, merges included (a commit has more
# ancestors than any of its parents), and dpkg compares them as numbers.
set -euo pipefail
repo=${1:?usage: debversion.sh REPO GIT_DESCRIBE}
d=${2:?usage: debversion.sh REPO GIT_DESCRIBE}
suffix=
if [[ $d == *-dirty ]]; then d=${d%-dirty}; suffix=+dirty; fi
if [[ $d =~ ^[0-9a-f]{7,40}$ ]]; then
	count=$(git -C "$repo" rev-list --count "$d" 2>/dev/null) ||
		{ echo "debversion: cannot count the commits of $d in $repo" >&2; exit 1; }
	v="0~git$count.$d"
elif [[ $d =~ ^v?([0-9][0-9A-Za-z.~+]*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
	v="${BASH_REMATCH[1]}+git${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"
elif [[ $d =~ ^v?([0-9][0-9A-Za-z.~+]*)$ ]]; then
	v=${BASH_REMATCH[1]}
else
	v="0~$(printf '%s' "$d" | tr -c 'A-Za-z0-9.+~\n' '.')"
fi
printf '%s%s\n' "$v" "$suffix"
