//go:build linux && (amd64 || arm64)

package bpf

import (
	"errors"
	"log/slog"
	"os"
	"testing"
)

func TestPrivilegeError(t *testing.T) {
	t.Parallel()
	const (
		sysAdmin = 1 << capSysAdmin
		perfmon  = 1 << capPerfmon
		bpfCap   = 1 << capBPF
	)
	tests := []struct {
		name string
		caps uint64
		want string // "" for no error
	}{
		{"root", 0x1ffffffffff, ""},
		{"CAP_SYS_ADMIN", sysAdmin, ""},
		{"CAP_BPF and CAP_PERFMON", bpfCap | perfmon, ""},
		{"nothing", 0, "no privilege to trace: missing CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"},
		{"CAP_BPF only", bpfCap, "no privilege to trace: missing CAP_PERFMON (or CAP_SYS_ADMIN)"},
		{"CAP_PERFMON only", perfmon, "no privilege to trace: missing CAP_BPF (or CAP_SYS_ADMIN)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := privilegeError(tt.caps)
			if tt.want == "" {
				if err != nil {
					t.Errorf("privilegeError(%#x) = %v, want nil", tt.caps, err)
				}
				return
			}
			if err == nil || err.Error() != tt.want || !errors.Is(err, ErrNoPrivilege) {
				t.Errorf("privilegeError(%#x) = %v, want %q wrapping ErrNoPrivilege", tt.caps, err, tt.want)
			}
		})
	}
}

// TestOpenWithoutIBCore runs on hosts without RDMA (CI, this machine): Open
// says what is missing, and callers can tell with errors.Is.
func TestOpenWithoutIBCore(t *testing.T) {
	if _, err := os.Stat("/sys/module/ib_core"); err == nil {
		t.Skip("ib_core is loaded here; the lab tests cover Open")
	}
	_, err := Open(slog.New(slog.DiscardHandler), Options{})
	if err == nil {
		t.Fatal("Open without ib_core succeeded")
	}
	if !errors.Is(err, ErrNoIBCore) && !errors.Is(err, ErrNoPrivilege) && !errors.Is(err, ErrNoBTF) {
		t.Errorf("Open = %v, want ErrNoIBCore, ErrNoPrivilege or ErrNoBTF", err)
	}
	t.Log(err)
}

func TestOpenBadBufferSize(t *testing.T) {
	t.Parallel()
	if _, err := Open(slog.New(slog.DiscardHandler), Options{BufferBytes: 5000}); !errors.Is(err, errBufferSize) {
		t.Errorf("Open with a 5000-byte buffer = %v", err)
	}
}
