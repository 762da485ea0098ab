package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// TestIBCoreOf: what a kernel has of ib_core is read from /sys/module and
// the kernel's modules directory, whichever place depmod put the module.
func TestIBCoreOf(t *testing.T) {
	t.Parallel()
	const release = "6.12.0-1-amd64"
	tests := []struct {
		name  string
		files map[string]string // path under the root: content
		want  ibCoreState
	}{
		{name: "loaded", files: map[string]string{"sys/module/ib_core/refcnt": "3\n"}, want: ibCoreModule},
		{name: "no modules of this kernel (a container)", files: map[string]string{"lib/modules/6.1.0-9-amd64/modules.dep": ""}, want: ibCoreUnknown},
		{name: "a module, compressed", files: map[string]string{
			"lib/modules/" + release + "/modules.dep": "kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko.xz\nkernel/drivers/infiniband/core/ib_core.ko.xz:\n",
		}, want: ibCoreModule},
		{name: "a module from updates (OFED)", files: map[string]string{
			"lib/modules/" + release + "/modules.dep": "updates/dkms/ib_core.ko: updates/dkms/mlx_compat.ko\n",
		}, want: ibCoreModule},
		{name: "built in", files: map[string]string{
			"lib/modules/" + release + "/modules.builtin": "kernel/drivers/infiniband/core/ib_core.ko\n",
			"lib/modules/" + release + "/modules.dep":     "kernel/fs/ext4/ext4.ko:\n",
		}, want: ibCoreModule},
		{name: "a kernel without RDMA", files: map[string]string{
			"lib/modules/" + release + "/modules.builtin": "kernel/fs/ext4/ext4.ko\n",
			"lib/modules/" + release + "/modules.dep":     "kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko\nkernel/drivers/infiniband/hw/foo_ib_core_x.ko:\n",
		}, want: ibCoreNone},
		{name: "no depmod lists, the module in its place", files: map[string]string{
			"lib/modules/" + release + "/kernel/drivers/infiniband/core/ib_core.ko.zst": "",
		}, want: ibCoreModule},
		{name: "configured without InfiniBand, no modules (this host)", files: map[string]string{
			"proc/config.gz": gzipped("CONFIG_NET=y\n# CONFIG_MODULES is not set\n# CONFIG_INFINIBAND is not set\n"),
		}, want: ibCoreNone},
		{name: "configured without InfiniBand, in /boot", files: map[string]string{
			"boot/config-" + release: "# CONFIG_INFINIBAND is not set\n", "lib/modules/" + release + "/modules.dep": "",
		}, want: ibCoreNone},
		{name: "configured with InfiniBand as a module, no modules here", files: map[string]string{
			"proc/config.gz": gzipped("CONFIG_INFINIBAND=m\n"),
		}, want: ibCoreUnknown},
		{name: "no depmod lists, no module", files: map[string]string{
			"lib/modules/" + release + "/kernel/fs/ext4.ko": "",
		}, want: ibCoreNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for path, content := range tt.files {
				p := filepath.Join(root, path)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := ibCoreOf(root, release); got != tt.want {
				t.Errorf("ibCoreOf = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestNoRDMAHints: "modprobe ib_core" only when there is an ib_core to
// load; a kernel built without RDMA is said to be one (issue 24: the hint
// told to modprobe a module that did not exist).
func TestNoRDMAHints(t *testing.T) {
	t.Parallel()
	noNetlink := &rdmanl.Error{Op: "open netlink socket", Err: syscall.EPROTONOSUPPORT}
	noIBCore := fmt.Errorf("bpf: open probes: %w", bpf.ErrNoIBCore)
	tests := []struct {
		name    string
		err     error
		state   ibCoreState
		want    string
		wantNot string
	}{
		{"netlink, a module", noNetlink, ibCoreModule, "(this kernel has no RDMA netlink: modprobe ib_core, or load an RDMA driver)", ""},
		{"netlink, no RDMA in the kernel", noNetlink, ibCoreNone, "(this kernel has no RDMA support: ib_core is neither built in nor one of its modules)", "modprobe"},
		{"netlink, no modules to look in", noNetlink, ibCoreUnknown, "/lib/modules has no modules of this kernel", "or load an RDMA driver"},
		{"probes, a module", noIBCore, ibCoreModule, "(modprobe ib_core, or load an RDMA driver)", ""},
		{"probes, no RDMA in the kernel", noIBCore, ibCoreNone, "this kernel has no RDMA support", "modprobe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := userMessage(tt.err, func() ibCoreState { return tt.state })
			if !strings.Contains(got, tt.want) || tt.wantNot != "" && strings.Contains(got, tt.wantNot) {
				t.Errorf("userMessage = %q, want %q in it and not %q", got, tt.want, tt.wantNot)
			}
		})
	}
	asked := false
	userMessage(&rdmanl.Error{Op: "dump QPs of rxe0", Err: syscall.EPERM}, func() ibCoreState { asked = true; return ibCoreNone })
	if asked {
		t.Error("the modules were looked at for an error that is not about ib_core")
	}
}

// gzipped is s compressed, as /proc/config.gz is.
func gzipped(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}
