package bpf

import (
	"encoding/json"
	"testing"

	"github.com/rdmatool/rdmatool/rdmanl"
)

func TestNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    interface{ String() string }
		want string
	}{
		{"qp_create", KindQPCreate, "qp_create"},
		{"qp_modify", KindQPModify, "qp_modify"},
		{"qp_destroy", KindQPDestroy, "qp_destroy"},
		{"qp_event", KindQPEvent, "qp_event"},
		{"device_event", KindDeviceEvent, "device_event"},
		{"device_register", KindDeviceRegister, "device_register"},
		{"device_unregister", KindDeviceUnregister, "device_unregister"},
		{"device_rename", KindDeviceRename, "device_rename"},
		{"drain_start", KindDrainStart, "drain_start"},
		{"drain_end", KindDrainEnd, "drain_end"},
		{"kind 0", Kind(0), "unknown(0)"},
		{"kind from a newer object", Kind(11), "unknown(11)"},
		{"CQ_ERR", IBEvent(0), "CQ_ERR"},
		{"QP_FATAL", IBEventQPFatal, "QP_FATAL"},
		{"DEVICE_FATAL", IBEventDeviceFatal, "DEVICE_FATAL"},
		{"PORT_ACTIVE", IBEvent(9), "PORT_ACTIVE"},
		{"PORT_ERR", IBEvent(10), "PORT_ERR"},
		{"LAST_WQE", IBEventQPLastWQE, "QP_LAST_WQE_REACHED"},
		{"GID_CHANGE", IBEvent(18), "GID_CHANGE"},
		{"WQ_FATAL", IBEvent(19), "WQ_FATAL"},
		{"event from a newer kernel", IBEvent(20), "unknown(20)"},
		{"mode none", ModeNone, "none"},
		{"mode fentry", ModeFentry, "fentry"},
		{"mode kprobe", ModeKprobe, "kprobe"},
		{"mode mixed", ModeMixed, "mixed"},
		{"mode unknown", Mode(9), "unknown(9)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestEventJSON checks that enums marshal as names, for callers that
// encode Events as they are.
func TestEventJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(struct {
		Kind  Kind
		Event IBEvent
		Mode  Mode
		State rdmanl.QPState
	}{KindQPEvent, IBEventQPLastWQE, ModeFentry, rdmanl.QPStateErr})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Kind":"qp_event","Event":"QP_LAST_WQE_REACHED","Mode":"fentry","State":"ERR"}`; string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
}

func TestProbeNames(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, ps := range probeSpecs {
		if got := probeName(ps.id); got != ps.function {
			t.Errorf("probeName(%d) = %q, want %q", ps.id, got, ps.function)
		}
		if seen[ps.function] {
			t.Errorf("function %s traced twice", ps.function)
		}
		seen[ps.function] = true
	}
	if got := probeName(0); got != "unknown(0)" {
		t.Errorf("probeName(0) = %q", got)
	}
}
