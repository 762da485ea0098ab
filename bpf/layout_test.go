//go:build linux && (amd64 || arm64)

package bpf

import (
	"reflect"
	"testing"
	"unsafe"
)

// TestRecordLayout holds the decoder's offsets to struct qp_event as clang
// laid it out: bpf2go generated qpQpEvent from the object's BTF.
func TestRecordLayout(t *testing.T) {
	t.Parallel()
	var r qpQpEvent
	var vma = qpUserCall{}.Vma // struct user_vma, in qp_event's union with str
	if got := unsafe.Sizeof(r); got != recordSize {
		t.Errorf("sizeof(struct qp_event) = %d, decoder expects %d", got, recordSize)
	}
	tests := []struct {
		field string
		got   uintptr
		want  int
	}{
		{"ts_ns", unsafe.Offsetof(r.TsNs), offTS},
		{"duration_ns", unsafe.Offsetof(r.DurationNs), offDuration},
		{"user_ret (union with duration_ns)", unsafe.Offsetof(r.DurationNs), offUserRet},
		{"kind", unsafe.Offsetof(r.Kind), offKind},
		{"probe", unsafe.Offsetof(r.Probe), offProbe},
		{"qp_type", unsafe.Offsetof(r.QpType), offQPType},
		{"flags", unsafe.Offsetof(r.Flags), offFlags},
		{"dev_index", unsafe.Offsetof(r.DevIndex), offDevIndex},
		{"qpn", unsafe.Offsetof(r.Qpn), offQPN},
		{"srqn", unsafe.Offsetof(r.Srqn), offSRQN},
		{"result", unsafe.Offsetof(r.Result), offResult},
		{"pid", unsafe.Offsetof(r.Pid), offPID},
		{"tid", unsafe.Offsetof(r.Tid), offTID},
		{"ib_event", unsafe.Offsetof(r.IbEvent), offIBEvent},
		{"port", unsafe.Offsetof(r.Port), offPort},
		{"kstack_id (union with port)", unsafe.Offsetof(r.Port), offKStackID},
		{"new_state", unsafe.Offsetof(r.NewState), offNewState},
		{"user_fn", unsafe.Offsetof(r.UserFn), offUserFn},
		{"cur_state", unsafe.Offsetof(r.CurState), offCurState},
		{"comm", unsafe.Offsetof(r.Comm), offComm},
		{"dev_name", unsafe.Offsetof(r.DevName), offDevName},
		{"str", unsafe.Offsetof(r.Str), offStr},
		{"vma.start (union with str)", unsafe.Offsetof(r.Str) + unsafe.Offsetof(vma.Start), offVMAStart},
		{"vma.pgoff", unsafe.Offsetof(r.Str) + unsafe.Offsetof(vma.Pgoff), offVMAPgoff},
		{"vma.ino", unsafe.Offsetof(r.Str) + unsafe.Offsetof(vma.Ino), offVMAIno},
		{"vma.dev", unsafe.Offsetof(r.Str) + unsafe.Offsetof(vma.Dev), offVMADev},
	}
	if size := unsafe.Sizeof(vma); size > unsafe.Sizeof(r.Str) {
		t.Errorf("sizeof(struct user_vma) = %d, more than str's %d it shares", size, unsafe.Sizeof(r.Str))
	}
	for _, tt := range tests {
		if int(tt.got) != tt.want {
			t.Errorf("offsetof(%s) = %d, decoder reads %d", tt.field, tt.got, tt.want)
		}
	}
	spec, err := loadQp()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"stacks0", "stacks1"} {
		if got, want := spec.Maps[name].ValueSize, uint32(stackDepth*8); got != want {
			t.Errorf("map %s: values of %d bytes, the reader reads %d", name, got, want)
		}
		if got, want := spec.Maps[name].KeySize, uint32(4); got != want {
			t.Errorf("map %s: keys of %d bytes, want %d (the stack id)", name, got, want)
		}
		if got, want := spec.Maps[name].MaxEntries, uint32(stackMapCapacity); got != want {
			t.Errorf("map %s: %d entries, the reader walks at most %d", name, got, want)
		}
	}
	if got := spec.Maps["counters"].MaxEntries; got <= counterStacksRefused {
		t.Errorf("map counters: %d slots, StackStats reads slot %d", got, counterStacksRefused)
	}
	for name, n := range map[string]int{"comm": len(r.Comm), "dev_name": len(r.DevName), "str": len(r.Str)} {
		want := nameLen
		if name == "comm" {
			want = commLen
		}
		if n != want {
			t.Errorf("len(%s) = %d, decoder reads %d", name, n, want)
		}
	}
}

// TestProbeSpecsMatchObject checks the probe table against the compiled
// object: every program it names exists with the right type and target,
// and every program in the object is in the table.
func TestProbeSpecsMatchObject(t *testing.T) {
	t.Parallel()
	spec, err := loadQp()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	ids := map[uint8]bool{}
	for _, ps := range probeSpecs {
		if ids[ps.id] {
			t.Errorf("probe id %d used twice", ps.id)
		}
		ids[ps.id] = true
		for section, name := range map[string]string{"fentry": ps.fentry, "fexit": ps.fexit, "kprobe": ps.kprobe, "kretprobe": ps.kretprobe} {
			if name == "" {
				continue
			}
			used[name] = true
			p, ok := spec.Programs[name]
			if !ok {
				t.Errorf("%s: program %s not in the object", ps.function, name)
				continue
			}
			if want := section + "/" + ps.function; p.SectionName != want {
				t.Errorf("program %s: section %q, want %q", name, p.SectionName, want)
			}
		}
		if (ps.fentry == "" && ps.fexit == "") || (ps.kprobe == "" && ps.kretprobe == "") {
			t.Errorf("%s: needs an fentry/fexit and a kprobe/kretprobe variant", ps.function)
		}
	}
	// The creation-site uprobes (sites_linux.go), attached to libraries
	// rather than kernel functions.
	for name, section := range map[string]string{"uprobe_lib_entry": "uprobe", "uretprobe_lib_return": "uretprobe"} {
		used[name] = true
		if p, ok := spec.Programs[name]; !ok || p.SectionName != section {
			t.Errorf("program %s: want it in section %q: %+v", name, section, p)
		}
	}
	for name := range spec.Programs {
		if !used[name] {
			t.Errorf("program %s is in the object but no probe uses it", name)
		}
	}
	if got := reflect.TypeOf(qpQpEvent{}).NumField(); got != 22 {
		t.Errorf("struct qp_event has %d fields (with padding); update the decoder and this test", got)
	}
}
