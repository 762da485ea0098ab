package reset

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

func TestCheck(t *testing.T) {
	ok := Options{Device: "rxe0", Timeout: time.Second, Yes: true, Helper: []string{"rdmatool", "reset-helper"}}
	tests := []struct {
		name string
		o    func(Options) Options
		want string // "" for no error
	}{
		{"good", func(o Options) Options { return o }, ""},
		{"no device", func(o Options) Options { o.Device = ""; return o }, "no device"},
		{"unknown method", func(o Options) Options { o.Method = "reboot"; return o }, `unknown method "reboot"`},
		{"zero timeout", func(o Options) Options { o.Timeout = 0; return o }, "timeout 0s: must be more than 0"},
		{"negative timeout", func(o Options) Options { o.Timeout = -time.Second; return o }, "must be more than 0"},
		{"negative grace", func(o Options) Options { o.Grace = -time.Second; return o }, "grace -1s"},
		{"no helper", func(o Options) Options { o.Helper = nil; return o }, "no helper"},
		{"dry run needs no helper", func(o Options) Options { o.Helper, o.DryRun = nil, true; return o }, ""},
		{"unconfirmed needs no helper", func(o Options) Options { o.Helper, o.Yes = nil, false; return o }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.o(ok))
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Check() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestChoose(t *testing.T) {
	rxe := target{dev: rdmanl.Device{Name: "rxe0"}, kind: "rxe", netdev: "dummy0", offered: []Method{MethodRelink, MethodNetdevBounce}}
	rxePCI := target{dev: rdmanl.Device{Name: "rxe1"}, kind: "rxe", netdev: "eth0",
		fn:      &sysfs.PCIFunction{Addr: "0000:01:01.0", Driver: "e1000e", Resettable: true},
		offered: []Method{MethodRelink, MethodPCIReset, MethodUnbind, MethodNetdevBounce}}
	hca := target{dev: rdmanl.Device{Name: "mlx5_0"}, kind: "pci",
		fn: &sysfs.PCIFunction{Addr: "0000:3b:00.0", Driver: "mlx5_core"}, offered: []Method{MethodUnbind}}
	none := target{dev: rdmanl.Device{Name: "odd0"}}
	tests := []struct {
		name string
		t    target
		m    Method
		want Method
		err  string
	}{
		{"auto on rxe", rxe, MethodAuto, MethodRelink, ""},
		{"default is auto", rxe, "", MethodRelink, ""},
		{"bounce on request", rxe, MethodNetdevBounce, MethodNetdevBounce, ""},
		{"not offered", rxe, MethodPCIReset, "", "method pci-reset: not offered by rxe0 (software rxe, on dummy0, no devlink instance; it offers relink, netdev-bounce)"},
		{"unbind under rxe", rxePCI, MethodUnbind, MethodUnbind, ""},
		{"auto on a HCA without reset", hca, MethodAuto, MethodUnbind, ""},
		{"nothing applies", none, MethodAuto, "", "odd0 (no PCI function and no software provider, no devlink instance): no reset method applies"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.t.choose(tt.m)
			if got != tt.want || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("choose(%q) = %q, %v; want %q, %q", tt.m, got, err, tt.want, tt.err)
			}
		})
	}
}

func TestParseMethod(t *testing.T) {
	for _, m := range []string{"auto", "relink", "devlink-reload", "pci-reset", "unbind", "netdev-bounce"} {
		if got, err := ParseMethod(m); err != nil || string(got) != m {
			t.Errorf("ParseMethod(%q) = %q, %v", m, got, err)
		}
	}
	for _, m := range []string{"", "flr", "Relink", "reload"} {
		if _, err := ParseMethod(m); err == nil {
			t.Errorf("ParseMethod(%q) accepted", m)
		}
	}
	// The refusal is typed: the method, and the reason without the prefix.
	_, err := ParseMethod("reboot")
	const reason = `unknown method "reboot" (want one of auto, relink, devlink-reload, pci-reset, unbind, netdev-bounce)`
	var me *MethodError
	if !errors.As(err, &me) || me.Method != "reboot" || me.Err.Error() != reason || err.Error() != "reset: "+reason {
		t.Errorf("ParseMethod(reboot) = %v, want a *MethodError saying %q", err, reason)
	}
}
