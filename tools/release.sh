#!/bin/sh
# Tags a release of the Go modules outside clients depend on: gen (the
# generated API) and clients/go (the SDK), at one version, and the
# repository itself. clients/go is pointed at gen's version of the same
# release, so that `go get github.com/informerhub/informerhub/clients/go@VERSION`
# brings the matching gen once the tags are pushed. It records the API of
# the release (api/released.json), which `buf breaking` then guards.
#
#	tools/release.sh vX.Y.Z       (make release RELEASE=vX.Y.Z)
set -eu
version=${1:-}
# v0 and v1 only: from v2 on, Go's module paths must end in /v2, which
# this repository's do not.
if ! printf '%s\n' "$version" | grep -Eq '^v[01]\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$'; then
	echo "usage: make release RELEASE=vX.Y.Z (a semantic version of major version 0 or 1, such as v0.1.0)" >&2
	exit 2
fi
cd "$(git rev-parse --show-toplevel)"
for tag in "$version" "gen/$version" "clients/go/$version"; do
	if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
		echo "release: the tag $tag exists already" >&2
		exit 1
	fi
done
# What the tags point at is what is committed: refuse to leave out work in
# progress.
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	echo "release: commit or stash your changes first" >&2
	exit 1
fi
${BUF:-buf} build -o api/released.json
# Every module that requires gen or clients/go requires this release's
# (each keeps its replace directive, so that it builds from this tree).
(cd clients/go && go mod edit -require="github.com/informerhub/informerhub/gen@$version")
go mod edit -require="github.com/informerhub/informerhub/gen@$version" -require="github.com/informerhub/informerhub/clients/go@$version"
git add go.mod clients/go/go.mod
if [ -f api/released.json ]; then git add api/released.json; fi
git commit -q -m "Release $version" -m "clients/go requires gen $version; api/released.json is the API of $version."
for tag in "$version" "gen/$version" "clients/go/$version"; do
	git tag -a "$tag" -m "informerhub $version"
done
echo "Tagged $version, gen/$version and clients/go/$version. Publish them with:"
echo "  git push origin HEAD $version gen/$version clients/go/$version"
