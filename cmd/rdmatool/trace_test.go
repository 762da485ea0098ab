package main

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/rdmanl"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

var traceEvents = []bpf.Event{
	{Kind: bpf.KindQPCreate, Time: t0, DevIndex: 0, DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, OnSRQ: true, SRQN: 3,
		PID: 272, TID: 272, Comm: "qpwork", Probe: "ib_create_qp_user"},
	{Kind: bpf.KindQPModify, Time: t0.Add(time.Millisecond), DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, OnSRQ: true,
		SRQN: 3, NewState: rdmanl.QPStateErr, HasState: true, PID: 272, TID: 273, Comm: "qpwork", Probe: "_ib_modify_qp"},
	{Kind: bpf.KindQPEvent, Time: t0.Add(2 * time.Millisecond), DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, OnSRQ: true,
		SRQN: 3, IBEvent: bpf.IBEventQPLastWQE, Probe: "__ib_qp_event_handler"},
	{Kind: bpf.KindQPCreate, Time: t0, DevIndex: 2, DevName: "trcrxe", QPN: 1, QPType: rdmanl.QPTypeGSI, PID: 300, TID: 300,
		Comm: "rdma", KernOwner: "ib_core", Probe: "ib_create_qp_kernel"},
	{Kind: bpf.KindQPDestroy, Time: t0.Add(time.Second), DevName: "rxe0", QPN: 17, QPType: rdmanl.QPTypeRC, Result: -16,
		PID: 272, TID: 272, Comm: "qpwork", Probe: "ib_destroy_qp_user"},
	{Kind: bpf.KindDeviceEvent, Time: t0.Truncate(time.Second), DevIndex: 1, DevName: "siw0", IBEvent: 10, Port: 1,
		Probe: "ib_dispatch_event"},
	{Kind: bpf.KindDeviceRename, Time: t0, DevIndex: 2, DevName: "trcrxe", NewName: "fab0-hca0", PID: 9, TID: 9, Comm: "rdma",
		Probe: "ib_device_rename"},
	{Kind: bpf.KindDrainEnd, Time: t0, DevName: "rxe0", QPN: 20, QPType: rdmanl.QPTypeRC, OnSRQ: true,
		Duration: 60*time.Second + 1500*time.Microsecond, PID: 5, TID: 5, Comm: "kworker/0:1", KernOwner: "nvme_rdma",
		Probe: "ib_drain_qp"},
}

// TestTraceHelp: the help lists the fields of bpf.EventJSON, the -j
// line, in order, and its lines fit a terminal.
func TestTraceHelp(t *testing.T) {
	t.Parallel()
	help := traceLong()
	want := "JSON fields, always present: kind, time, device, dev_index, qpn, qp_type, srq, srqn, new_state, cur_state, result, " +
		"pid, tid, comm, kern_owner, event, event_code, port, new_name, probe, duration_seconds. "
	if got := strings.Join(strings.Fields(help), " "); !strings.Contains(got, want) {
		t.Errorf("help does not list the JSON fields %q:\n%s", want, help)
	}
	for line := range strings.Lines(help) {
		if len(strings.TrimSuffix(line, "\n")) > 80 {
			t.Errorf("help line longer than 80 characters: %q", line)
		}
	}
}

func TestWrapWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		s     string
		width int
		want  string
	}{
		{"fits", "a b c", 5, "a b c"},
		{"breaks at spaces", "aa bb cc", 5, "aa bb\ncc"},
		{"folds white space", " aa \n bb\tcc ", 80, "aa bb cc"},
		{"a long word alone", "a bbbbbbb c", 3, "a\nbbbbbbb\nc"},
		{"empty", "", 10, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, wrapWords(tt.s, tt.width)); diff != "" {
				t.Errorf("wrapWords(%q, %d) (-want +got):\n%s", tt.s, tt.width, diff)
			}
		})
	}
}

func TestAppendTraceText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ev      bpf.Event
		details bool
		want    string
	}{
		{traceEvents[0], false, "2026-01-02T03:04:05.123456789Z qp_create rxe0 qpn 17 qp-type RC srqn 3 result 0 pid 272 comm qpwork"},
		{traceEvents[1], true, "2026-01-02T03:04:05.124456789Z qp_modify rxe0 dev-index 0 qpn 17 qp-type RC srqn 3 new-state ERR " +
			"result 0 pid 272 tid 273 comm qpwork probe _ib_modify_qp"},
		{traceEvents[2], false, "2026-01-02T03:04:05.125456789Z qp_event rxe0 qpn 17 qp-type RC srqn 3 event QP_LAST_WQE_REACHED event-code 16"},
		{traceEvents[3], false, "2026-01-02T03:04:05.123456789Z qp_create trcrxe qpn 1 qp-type GSI result 0 pid 300 comm rdma kern-owner [ib_core]"},
		{traceEvents[5], false, "2026-01-02T03:04:05Z device_event siw0 event PORT_ERR event-code 10 port 1"},
		{traceEvents[6], false, "2026-01-02T03:04:05.123456789Z device_rename trcrxe new-name fab0-hca0 result 0 pid 9 comm rdma"},
		{traceEvents[7], false, "2026-01-02T03:04:05.123456789Z drain_end rxe0 qpn 20 qp-type RC srqn 0 duration-seconds 60.0015 " +
			"pid 5 comm kworker/0:1 kern-owner [nvme_rdma]"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := string(appendTraceText(nil, tt.ev, "", tt.details)); got != tt.want+"\n" {
				t.Errorf("appendTraceText:\n got %q\nwant %q", got, tt.want+"\n")
			}
		})
	}
}

func TestAttachedLine(t *testing.T) {
	t.Parallel()
	probes := []bpf.Probe{
		{Function: "ib_create_qp_user", Mode: bpf.ModeFentry},
		{Function: "_ib_modify_qp", Mode: bpf.ModeKprobe, Note: "fentry: permission denied"},
		{Function: "__ib_qp_event_handler", Note: "not in this kernel"},
		{Function: "ib_uverbs_qp_event_handler", Mode: bpf.ModeKprobe},
	}
	want := "attached 3 probes (mixed); kprobe fallback: _ib_modify_qp; skipped: __ib_qp_event_handler (not in this kernel)"
	if got := attachedLine(probes, bpf.ModeMixed); got != want {
		t.Errorf("attachedLine:\n got %s\nwant %s", got, want)
	}
}

// The trace's open errors get the hint their cause calls for, once, and
// never the netlink one.
func TestTraceOpenErrorHints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("bpf: open probes: %w: missing CAP_BPF", bpf.ErrNoPrivilege),
			"bpf: open probes: no privilege to trace: missing CAP_BPF (run as root, or grant CAP_BPF and CAP_PERFMON)"},
		{fmt.Errorf("bpf: open probes: %w", bpf.ErrNoIBCore),
			"bpf: open probes: ib_core is not loaded (modprobe ib_core, or load an RDMA driver)"},
		{fmt.Errorf("bpf: open probes: %w: kernel: no such file", bpf.ErrNoBTF), "bpf: open probes: no BTF: kernel: no such file"},
	}
	for _, tt := range tests {
		if got := userMessage(tt.err, func() ibCoreState { return ibCoreModule }); got != tt.want {
			t.Errorf("userMessage = %q, want %q", got, tt.want)
		}
	}
}

func TestUint32s(t *testing.T) {
	t.Parallel()
	if got, err := uint32s("--qpn", []uint{0, 17, 1<<32 - 1}); err != nil || len(got) != 3 || got[2] != 1<<32-1 {
		t.Errorf("uint32s = %v, %v", got, err)
	}
	if _, err := uint32s("--qpn", []uint{1 << 32}); err == nil || err.Error() != "--qpn 4294967296: out of range" {
		t.Errorf("uint32s(1<<32) = %v", err)
	}
}

// TestTraceBufferFlag: a ring buffer size that is not a power of two is
// refused with one line and exit status 2, before any probe is loaded.
func TestTraceBufferFlag(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"3", "0", "-4", "2048", "many"} {
		code, stdout, stderr := runCLI(t, "trace", "--buffer-mib", arg)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--buffer-mib") {
			t.Errorf("trace --buffer-mib %s: exit %d, stdout %q, stderr %q; want 2 and one line naming the flag", arg, code, stdout, stderr)
		}
	}
}

// TestTraceSummary: the summary, its JSON line with -j and its line on
// stderr without, counts the lost events by cause and the creates whose
// stack the stack map refused.
func TestTraceSummary(t *testing.T) {
	st := bpf.Stats{Lost: 1, Missed: 2, Unmatched: 3, Malformed: 4}
	var out, errOut strings.Builder
	w := bufio.NewWriter(&out)
	if err := writeTraceSummary(w, &globals{json: true, stderr: &errOut}, 42, st, 5); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want := `{"kind":"summary","events":42,"lost":10,"ring_full":1,"missed":2,"unmatched":3,"malformed":4,"stacks_refused":5}` + "\n"
	if out.String() != want || errOut.Len() != 0 {
		t.Errorf("-j summary %q (stderr %q), want %q", out.String(), errOut.String(), want)
	}
	out.Reset()
	if err := writeTraceSummary(w, &globals{stderr: &errOut}, 42, st, 5); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want = "rdmatool trace: 42 events, 10 lost (ring buffer full 1, missed 2, unmatched 3, malformed 4), 5 stacks not stored\n"
	if errOut.String() != want || out.Len() != 0 {
		t.Errorf("summary on stderr %q (stdout %q), want %q", errOut.String(), out.String(), want)
	}
}
