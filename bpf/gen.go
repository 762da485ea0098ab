package bpf

// The probes are compiled by Debian's clang-14 for both little-endian
// targets that kprobes support here; the objects and Go files are committed,
// and `make generate-check` verifies that this line reproduces them.
//go:generate go tool bpf2go -cc clang-14 -tags linux -target amd64,arm64 -type qp_event qp qp.c -- -I./include -Wall -Werror -O2 -g
