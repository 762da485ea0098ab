package symbolize

import (
	"strings"
	"testing"
)

func TestSiteString(t *testing.T) {
	const id = "3f0e5c1b9d2a7c4e8f6a1b2c3d4e5f60718293a4"
	tests := []struct {
		name string
		site Site
		want string
	}{
		{"function", Site{Path: "/usr/local/bin/qpwork", BuildID: id, Offset: 0x124c, Symbol: "leak_qps", SymbolOffset: 0x4c}, "qpwork!leak_qps+0x4c"},
		{"stripped", Site{Path: "/usr/bin/ibv_rc_pingpong", BuildID: id, Offset: 0x1a2c}, "ibv_rc_pingpong+0x1a2c (build id " + id + ")"},
		{"no build ID", Site{Path: "/opt/app/bin/app", Offset: 0x10}, "app+0x10"},
		{"deleted", Site{Path: "/usr/lib/libibverbs.so.1 (deleted)", Symbol: "ibv_create_qp", SymbolOffset: 0}, "libibverbs.so.1 (deleted)!ibv_create_qp+0x0"},
		{"heap", Site{Path: "[heap]"}, "[heap]"},
		{"anonymous", Site{}, "?"},
		{"kernel module", Site{Kernel: true, Symbol: "nvmet_rdma_create_queue_ib", SymbolOffset: 0x1f0, Module: "nvmet_rdma"}, "nvmet_rdma_create_queue_ib+0x1f0 [nvmet_rdma]"},
		{"vmlinux", Site{Kernel: true, Symbol: "ib_create_qp_kernel", SymbolOffset: 0x2c}, "ib_create_qp_kernel+0x2c"},
		{"unknown kernel", Site{Kernel: true}, "?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.site.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCutSymbol(t *testing.T) {
	long := strings.Repeat("x", MaxSymbol-1) + "é" + strings.Repeat("y", 100)
	for _, tt := range []struct{ in, want string }{
		{"leak_qps", "leak_qps"},
		{strings.Repeat("a", MaxSymbol), strings.Repeat("a", MaxSymbol)},
		{strings.Repeat("a", MaxSymbol+1), strings.Repeat("a", MaxSymbol) + "…"},
		{long, strings.Repeat("x", MaxSymbol-1) + "…"}, // not in the middle of é
	} {
		if got := cutSymbol(tt.in); got != tt.want {
			t.Errorf("cutSymbol(%d bytes) = %q (%d bytes), want %d bytes", len(tt.in), got, len(got), len(tt.want))
		}
	}
}
