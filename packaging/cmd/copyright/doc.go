// Command copyright writes the Debian copyright file (machine-readable
// format 1.0, DEP-5) of a Go binary: rdmatool's own licenses (LICENSE,
// Apache-2.0, for the Go code; MIT or GPL-2.0-only for the eBPF program,
// bpf/qp.c) and, for the Go standard library and every module the binary's
// build information lists (what `go version -m` prints), the license
// github.com/google/licensecheck finds in the module's license files in
// the module cache, with those files' copyright lines.
//
//	go run ./packaging/cmd/copyright [-spdx] -modcache DIR -goroot DIR BINARY >copyright
//
// packaging/deb/build.sh runs it on the binary it packages; make image
// puts its output in the image, and its -spdx output (the same licenses
// as one SPDX expression) in the image's org.opencontainers.image.licenses
// label. Apache-2.0 and GPL-2
// texts are referred to in /usr/share/common-licenses (Debian policy
// 12.5); any other license's text is copied from the module. A module
// without a license file, or with one licensecheck does not recognize, is
// an error: a binary whose licenses are not known is not packaged.
package main
