package lab

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestModName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		{"crc32-pclmul.ko.xz", "crc32_pclmul"},
		{"kernel/arch/x86/crypto/crc32-pclmul.ko.xz", "crc32_pclmul"},
		{"kernel/drivers/infiniband/core/ib_core.ko.zst", "ib_core"},
		{"kernel/net/9p/9pnet_virtio.ko.gz", "9pnet_virtio"},
		{"extra/siw.ko", "siw"},
		{"rdma_rxe", "rdma_rxe"},
		{"rdma-rxe", "rdma_rxe"},
		{"snd-hda-codec-realtek.ko", "snd_hda_codec_realtek"},
	}
	for _, tt := range tests {
		if got := modName(tt.in); got != tt.want {
			t.Errorf("modName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStripCompression(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
	}{
		{"kernel/drivers/infiniband/core/ib_core.ko.xz", "kernel/drivers/infiniband/core/ib_core.ko"},
		{"kernel/net/9p/9p.ko.zst", "kernel/net/9p/9p.ko"},
		{"kernel/net/9p/9p.ko.gz", "kernel/net/9p/9p.ko"},
		{"extra/siw.ko", "extra/siw.ko"},
		{"modules.dep", "modules.dep"},
	}
	for _, tt := range tests {
		if got := stripCompression(tt.in); got != tt.want {
			t.Errorf("stripCompression(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// modulesDep is a cut of a 6.12 modules.dep: rdma_rxe and siw over ib_core,
// ib_uverbs; rdma_ucm over rdma_cm over iw_cm and ib_cm.
const modulesDep = `kernel/drivers/infiniband/core/ib_core.ko.xz:
kernel/drivers/infiniband/core/ib_uverbs.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/ib_cm.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/iw_cm.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/rdma_cm.ko.xz: kernel/drivers/infiniband/core/iw_cm.ko.xz kernel/drivers/infiniband/core/ib_cm.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/rdma_ucm.ko.xz: kernel/drivers/infiniband/core/ib_uverbs.ko.xz kernel/drivers/infiniband/core/rdma_cm.ko.xz kernel/drivers/infiniband/core/iw_cm.ko.xz kernel/drivers/infiniband/core/ib_cm.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz: kernel/drivers/infiniband/core/ib_uverbs.ko.xz kernel/net/ipv4/udp_tunnel.ko.xz kernel/net/ipv6/ip6_udp_tunnel.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/net/ipv4/udp_tunnel.ko.xz:
kernel/net/ipv6/ip6_udp_tunnel.ko.xz:
kernel/arch/x86/crypto/crc32-pclmul.ko.xz:
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz
kernel/net/9p/9pnet.ko.xz:
extra/siw.ko: kernel/drivers/infiniband/core/ib_core.ko.xz
`

func TestParseModulesDep(t *testing.T) {
	t.Parallel()
	got, err := parseModulesDep(strings.NewReader(modulesDep + "\nnot a dependency line\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]modDep{
		"ib_core":        {path: "kernel/drivers/infiniband/core/ib_core.ko.xz"},
		"ib_uverbs":      {path: "kernel/drivers/infiniband/core/ib_uverbs.ko.xz", deps: []string{"ib_core"}},
		"ib_cm":          {path: "kernel/drivers/infiniband/core/ib_cm.ko.xz", deps: []string{"ib_core"}},
		"iw_cm":          {path: "kernel/drivers/infiniband/core/iw_cm.ko.xz", deps: []string{"ib_core"}},
		"rdma_cm":        {path: "kernel/drivers/infiniband/core/rdma_cm.ko.xz", deps: []string{"iw_cm", "ib_cm", "ib_core"}},
		"rdma_ucm":       {path: "kernel/drivers/infiniband/core/rdma_ucm.ko.xz", deps: []string{"ib_uverbs", "rdma_cm", "iw_cm", "ib_cm", "ib_core"}},
		"rdma_rxe":       {path: "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz", deps: []string{"ib_uverbs", "udp_tunnel", "ip6_udp_tunnel", "ib_core"}},
		"udp_tunnel":     {path: "kernel/net/ipv4/udp_tunnel.ko.xz"},
		"ip6_udp_tunnel": {path: "kernel/net/ipv6/ip6_udp_tunnel.ko.xz"},
		"crc32_pclmul":   {path: "kernel/arch/x86/crypto/crc32-pclmul.ko.xz"},
		"9pnet_virtio":   {path: "kernel/net/9p/9pnet_virtio.ko.xz", deps: []string{"9pnet"}},
		"9pnet":          {path: "kernel/net/9p/9pnet.ko.xz"},
		"siw":            {path: "extra/siw.ko", deps: []string{"ib_core"}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(modDep{})); diff != "" {
		t.Errorf("parseModulesDep() (-want +got):\n%s", diff)
	}
}

func TestParseBuiltin(t *testing.T) {
	t.Parallel()
	got, err := parseBuiltin(strings.NewReader("kernel/lib/crc32.ko\n\nkernel/crypto/crc32c_generic.ko\n  kernel/drivers/virtio/virtio_pci.ko  \n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"crc32": true, "crc32c_generic": true, "virtio_pci": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseBuiltin() (-want +got):\n%s", diff)
	}
}

func TestModuleClosure(t *testing.T) {
	t.Parallel()
	deps, err := parseModulesDep(strings.NewReader(modulesDep))
	if err != nil {
		t.Fatal(err)
	}
	const core = "kernel/drivers/infiniband/core/"
	tests := []struct {
		name      string
		deps      map[string]modDep
		builtin   map[string]bool
		want      []string
		optional  map[string]bool
		wantFiles []string
		wantLoad  []string
		wantErr   []string // substrings of the error
	}{
		{
			name:      "dependencies first",
			deps:      deps,
			want:      []string{"rdma_rxe"},
			wantFiles: []string{core + "ib_core.ko.xz", core + "ib_uverbs.ko.xz", "kernel/net/ipv4/udp_tunnel.ko.xz", "kernel/net/ipv6/ip6_udp_tunnel.ko.xz", "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz"},
			wantLoad:  []string{"rdma_rxe"},
		},
		{
			// rdma_ucm reaches ib_core through five paths and iw_cm, ib_cm
			// through two: each file is shipped once.
			name: "diamond dependencies ship each module once",
			deps: deps,
			want: []string{"ib_core", "rdma_ucm", "rdma_cm", "siw"},
			wantFiles: []string{
				core + "ib_core.ko.xz", core + "ib_uverbs.ko.xz", core + "iw_cm.ko.xz", core + "ib_cm.ko.xz",
				core + "rdma_cm.ko.xz", core + "rdma_ucm.ko.xz", "extra/siw.ko",
			},
			wantLoad: []string{"ib_core", "rdma_ucm", "rdma_cm", "siw"},
		},
		{
			name:      "built-in modules are neither shipped nor loaded",
			deps:      deps,
			builtin:   map[string]bool{"ib_core": true, "udp_tunnel": true, "crc32_generic": true},
			want:      []string{"crc32_generic", "rdma_rxe"},
			optional:  map[string]bool{"crc32_generic": true},
			wantFiles: []string{core + "ib_uverbs.ko.xz", "kernel/net/ipv6/ip6_udp_tunnel.ko.xz", "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz"},
			wantLoad:  []string{"rdma_rxe"},
		},
		{
			name:      "a required built-in module is fine",
			deps:      deps,
			builtin:   map[string]bool{"veth": true},
			want:      []string{"veth", "siw"},
			wantFiles: []string{core + "ib_core.ko.xz", "extra/siw.ko"},
			wantLoad:  []string{"siw"},
		},
		{
			name:      "a missing optional module is skipped",
			deps:      deps,
			want:      []string{"virtio_pci", "9pnet_virtio", "crc32_generic", "crc32_pclmul"},
			optional:  map[string]bool{"virtio_pci": true, "crc32_generic": true, "crc32_pclmul": true},
			wantFiles: []string{"kernel/net/9p/9pnet.ko.xz", "kernel/net/9p/9pnet_virtio.ko.xz", "kernel/arch/x86/crypto/crc32-pclmul.ko.xz"},
			wantLoad:  []string{"9pnet_virtio", "crc32_pclmul"},
		},
		{
			name:    "a missing required module is an error",
			deps:    deps,
			want:    []string{"ib_core", "veth"},
			wantErr: []string{"veth", "modules.dep"},
		},
		{
			name: "a missing dependency names the chain",
			deps: map[string]modDep{
				"rdma_ucm": {path: "rdma_ucm.ko", deps: []string{"rdma_cm"}},
				"rdma_cm":  {path: "rdma_cm.ko", deps: []string{"ib_cm"}},
			},
			want:    []string{"rdma_ucm"},
			wantErr: []string{"module ib_cm", "[rdma_ucm rdma_cm]"},
		},
		{
			name: "an optional module with a missing dependency is an error",
			deps: map[string]modDep{
				"crc32_pclmul": {path: "crc32-pclmul.ko", deps: []string{"crypto_simd"}},
			},
			want:     []string{"crc32_pclmul"},
			optional: map[string]bool{"crc32_pclmul": true},
			wantErr:  []string{"module crypto_simd", "[crc32_pclmul]"},
		},
		{
			name:      "a dependency cycle ends",
			deps:      map[string]modDep{"a": {path: "a.ko", deps: []string{"b"}}, "b": {path: "b.ko", deps: []string{"a"}}},
			want:      []string{"a"},
			wantFiles: []string{"b.ko", "a.ko"},
			wantLoad:  []string{"a"},
		},
		{name: "nothing wanted", deps: deps},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, load, err := moduleClosure(tt.deps, tt.builtin, tt.want, tt.optional)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("moduleClosure() = %v, %v, want an error", files, load)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("moduleClosure() error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("moduleClosure(): %v", err)
			}
			if diff := cmp.Diff(tt.wantFiles, files); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLoad, load); diff != "" {
				t.Errorf("load (-want +got):\n%s", diff)
			}
		})
	}
}

// TestModuleClosureGuestModules runs the lab's own module list over the
// cut of modules.dep, as collectModules does on a kernel without virtio_pci,
// veth and the crc32 modules.
func TestModuleClosureGuestModules(t *testing.T) {
	t.Parallel()
	deps, err := parseModulesDep(strings.NewReader(modulesDep + `kernel/net/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz
kernel/drivers/net/dummy.ko.xz:
kernel/drivers/infiniband/core/ib_umad.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/block/null_blk/null_blk.ko.xz:
kernel/drivers/nvme/host/nvme-core.ko.xz:
kernel/drivers/nvme/host/nvme-fabrics.ko.xz: kernel/drivers/nvme/host/nvme-core.ko.xz
kernel/drivers/nvme/host/nvme-rdma.ko.xz: kernel/drivers/nvme/host/nvme-fabrics.ko.xz kernel/drivers/nvme/host/nvme-core.ko.xz kernel/drivers/infiniband/core/rdma_cm.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/nvme/target/nvmet.ko.xz: kernel/drivers/nvme/host/nvme-core.ko.xz
kernel/drivers/nvme/target/nvmet-rdma.ko.xz: kernel/drivers/nvme/target/nvmet.ko.xz kernel/drivers/infiniband/core/rdma_cm.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko.xz: kernel/drivers/ptp/ptp.ko.xz kernel/drivers/pps/pps_core.ko.xz
kernel/drivers/ptp/ptp.ko.xz: kernel/drivers/pps/pps_core.ko.xz
kernel/drivers/pps/pps_core.ko.xz:
`))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	optional := map[string]bool{}
	for _, m := range guestModules {
		want = append(want, m.name)
		optional[m.name] = m.optional
	}
	files, load, err := moduleClosure(deps, map[string]bool{"crc32c_generic": true, "libcrc32c": true}, want, optional)
	if err != nil {
		t.Fatal(err)
	}
	wantLoad := []string{"9pnet_virtio", "9p", "dummy", "crc32_pclmul", "ib_core", "ib_uverbs", "ib_umad",
		"ib_cm", "iw_cm", "rdma_cm", "rdma_ucm", "rdma_rxe", "siw",
		"null_blk", "nvme_core", "nvme_fabrics", "nvme_rdma", "nvmet", "nvmet_rdma", "e1000e"}
	if diff := cmp.Diff(wantLoad, load); diff != "" {
		t.Errorf("load (-want +got):\n%s", diff)
	}
	const core = "kernel/drivers/infiniband/core/"
	wantFiles := []string{
		"kernel/net/9p/9pnet.ko.xz", "kernel/net/9p/9pnet_virtio.ko.xz", "kernel/net/9p/9p.ko.xz",
		"kernel/drivers/net/dummy.ko.xz", "kernel/arch/x86/crypto/crc32-pclmul.ko.xz",
		core + "ib_core.ko.xz", core + "ib_uverbs.ko.xz", core + "ib_umad.ko.xz", core + "ib_cm.ko.xz",
		core + "iw_cm.ko.xz", core + "rdma_cm.ko.xz", core + "rdma_ucm.ko.xz",
		"kernel/net/ipv4/udp_tunnel.ko.xz", "kernel/net/ipv6/ip6_udp_tunnel.ko.xz",
		"kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz", "extra/siw.ko",
		"kernel/drivers/block/null_blk/null_blk.ko.xz", "kernel/drivers/nvme/host/nvme-core.ko.xz",
		"kernel/drivers/nvme/host/nvme-fabrics.ko.xz", "kernel/drivers/nvme/host/nvme-rdma.ko.xz",
		"kernel/drivers/nvme/target/nvmet.ko.xz", "kernel/drivers/nvme/target/nvmet-rdma.ko.xz",
		"kernel/drivers/pps/pps_core.ko.xz", "kernel/drivers/ptp/ptp.ko.xz", "kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko.xz",
	}
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}
