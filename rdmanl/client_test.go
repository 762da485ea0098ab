package rdmanl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
)

// The recordings in testdata come from the lab (TestLabRecord -update, see
// testdata/README.md). Device index 0 is rxe0 and 1 is siw0 on every kernel.
var labKernels = []string{"6.1", "6.12", "7.x"}

func labReplay(kernel string) replay {
	r := replay{
		{op: cmdGet}:    filepath.Join("testdata", recordedName("dev-dump", kernel, "")),
		{op: cmdSysGet}: filepath.Join("testdata", recordedName("sys-get", kernel, "")),
		{op: cmdResGet}: filepath.Join("testdata", recordedName("res-summary", kernel, "")),
	}
	for idx, provider := range []string{"rxe", "siw"} {
		for op, what := range map[uint16]string{
			cmdPortGet: "port-dump", cmdResQPGet: "qp-dump", cmdResSRQGet: "srq-dump", cmdResCQGet: "cq-dump",
			cmdResMRGet: "mr-dump", cmdResPDGet: "pd-dump", cmdResCtxGet: "ctx-dump", cmdResCMIDGet: "cm_id-dump",
		} {
			r[replayKey{op: op, devIndex: uint32(idx)}] = filepath.Join("testdata", recordedName(what, kernel, provider))
		}
	}
	return r
}

func collect[T any](t *testing.T, seq func(func(T, error) bool)) []T {
	t.Helper()
	var out []T
	for v, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// labSnapshot is everything the client decodes from one kernel's recordings.
type labSnapshot struct {
	Devices   []Device
	Ports     map[string][]Port
	System    systemSettings
	Summaries []Summary
	QPs       map[string][]QP
	SRQs      map[string][]SRQ
	CQs       map[string][]CQ
	MRs       map[string][]MR
	PDs       map[string][]PD
	Contexts  map[string][]Context
	CMIDs     map[string][]CMID
}

func decodeLab(t *testing.T, kernel string) labSnapshot {
	t.Helper()
	c := labReplay(kernel).client(t)
	ctx := t.Context()
	var s labSnapshot
	var err error
	if s.Devices, err = c.Devices(ctx); err != nil {
		t.Fatal(err)
	}
	if s.System, err = c.system(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Summaries, err = c.Summaries(ctx); err != nil {
		t.Fatal(err)
	}
	s.Ports, s.QPs, s.SRQs, s.CQs = map[string][]Port{}, map[string][]QP{}, map[string][]SRQ{}, map[string][]CQ{}
	s.MRs, s.PDs, s.Contexts, s.CMIDs = map[string][]MR{}, map[string][]PD{}, map[string][]Context{}, map[string][]CMID{}
	for _, d := range s.Devices {
		if s.Ports[d.Name], err = c.Ports(ctx, d); err != nil {
			t.Fatal(err)
		}
		s.QPs[d.Name] = collect(t, c.QPs(ctx, d, DumpOptions{}))
		s.SRQs[d.Name] = collect(t, c.SRQs(ctx, d, DumpOptions{}))
		s.CQs[d.Name] = collect(t, c.CQs(ctx, d, DumpOptions{}))
		s.MRs[d.Name] = collect(t, c.MRs(ctx, d, DumpOptions{}))
		s.PDs[d.Name] = collect(t, c.PDs(ctx, d, DumpOptions{}))
		s.Contexts[d.Name] = collect(t, c.Contexts(ctx, d, DumpOptions{}))
		s.CMIDs[d.Name] = collect(t, c.CMIDs(ctx, d, DumpOptions{}))
	}
	return s
}

// TestGoldenLab decodes every recording and compares the result with the
// golden JSON next to it (rewritten by go test -update).
func TestGoldenLab(t *testing.T) {
	for _, kernel := range labKernels {
		t.Run(kernel, func(t *testing.T) {
			got, err := json.MarshalIndent(decodeLab(t, kernel), "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "decoded_"+kernel+".golden.json")
			if *update {
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(strings.TrimSpace(string(want)), strings.TrimSpace(string(got))); diff != "" {
				t.Errorf("decoded recordings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLabFacts checks, on the recordings, what an operator reads off them.
func TestLabFacts(t *testing.T) {
	for _, kernel := range labKernels {
		t.Run(kernel, func(t *testing.T) {
			s := decodeLab(t, kernel)
			guids := map[string]string{}
			for _, d := range s.Devices {
				guids[d.Name] = d.NodeGUID.String() + " " + d.NodeType.String()
			}
			want := map[string]string{"rxe0": "0000:00ff:fe00:0101 ca", "siw0": "0000:00ff:fe00:0201 rnic"}
			if diff := cmp.Diff(want, guids); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			for dev, ports := range s.Ports {
				if len(ports) != 1 || ports[0].State != PortStateActive || ports[0].NetdevName == "" {
					t.Errorf("%s ports = %+v, want one ACTIVE port with a netdev", dev, ports)
				}
			}
			qps := s.QPs["rxe0"]
			if len(qps) < 300 {
				t.Fatalf("rxe0 has %d QPs, the recording holds over 300", len(qps))
			}
			gsi := slices.IndexFunc(qps, func(q QP) bool { return q.Type == QPTypeGSI })
			if gsi < 0 || qps[gsi].Owner.KernName != "ib_core" || qps[gsi].Port != 1 || qps[gsi].LQPN != 1 {
				t.Errorf("GSI QP of rxe0 missing or wrong: %+v", qps[gsi])
			}
			onSRQ, withGaps := 0, false
			for _, q := range qps {
				if q.OnSRQ {
					onSRQ++
				}
			}
			for _, srq := range s.SRQs["rxe0"] {
				if len(srq.QPs) > 1 {
					withGaps = true
				}
				for _, r := range srq.QPs {
					for n := r.Min; n <= r.Max; n++ {
						i := slices.IndexFunc(qps, func(q QP) bool { return q.LQPN == n })
						if i < 0 || !qps[i].OnSRQ || qps[i].SRQN != srq.SRQN {
							t.Errorf("QP %d is listed by SRQ %d but not joined to it", n, srq.SRQN)
						}
					}
				}
			}
			if onSRQ < 300 || !withGaps {
				t.Errorf("SRQ join: %d QPs on SRQs, ranges with gaps %v; want 300+ and gaps", onSRQ, withGaps)
			}
			// Kernel fact: on 6.1 siw_query_qp leaves the state unset.
			for _, q := range s.QPs["siw0"] {
				if q.Type != QPTypeRC {
					continue
				}
				if wantState := map[bool]QPState{true: QPStateReset, false: QPStateRTS}[kernel == "6.1"]; q.State != wantState {
					t.Errorf("siw QP %d state %s, want %s on %s", q.LQPN, q.State, wantState, kernel)
				}
			}
			if len(s.CMIDs["siw0"]) == 0 {
				t.Errorf("no CM IDs on siw0, the recording has a connected pair")
			}
		})
	}
}

func TestRecordingSpansMessages(t *testing.T) {
	for _, kernel := range labKernels {
		msgs := readRecorded(t, filepath.Join("testdata", recordedName("qp-dump", kernel, "rxe")))
		if len(msgs) < 2 {
			t.Errorf("%s: QP dump recording has %d message(s), want several", kernel, len(msgs))
		}
	}
}

// A caller that dumped a device's SRQs (to name ULPs with them) passes
// them to the QP dump: the QPs are joined as the dump's own SRQ dump joins
// them, and the kernel is asked for the device's SRQs once. A caller with
// none (an empty dump) makes no SRQ dump either.
func TestQPsJoinTheCallersSRQs(t *testing.T) {
	for _, kernel := range labKernels {
		t.Run(kernel, func(t *testing.T) {
			requests := map[replayKey]int{}
			c := labReplay(kernel).counting(t, requests)
			devs, err := c.Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			onSRQ := 0
			for _, dev := range devs {
				want := collect(t, c.QPs(t.Context(), dev, DumpOptions{}))
				clear(requests)
				srqs := collect(t, c.SRQs(t.Context(), dev, DumpOptions{}))
				got := collect(t, c.QPs(t.Context(), dev, DumpOptions{SRQs: &srqs}))
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: QPs joined with the caller's SRQs (-own dump +caller's):\n%s", dev.Name, diff)
				}
				wantRequests := map[replayKey]int{{cmdResSRQGet, dev.Index}: 1, {cmdResQPGet, dev.Index}: 1}
				if diff := cmp.Diff(wantRequests, requests); diff != "" {
					t.Errorf("%s: requests (-want +got):\n%s", dev.Name, diff)
				}
				for _, q := range got {
					if q.OnSRQ {
						onSRQ++
					}
				}
				clear(requests)
				var none []SRQ
				for _, q := range collect(t, c.QPs(t.Context(), dev, DumpOptions{SRQs: &none})) {
					if q.OnSRQ {
						t.Errorf("%s: QP %d on SRQ %d, joined with no SRQs", dev.Name, q.LQPN, q.SRQN)
					}
				}
				if diff := cmp.Diff(map[replayKey]int{{cmdResQPGet, dev.Index}: 1}, requests); diff != "" {
					t.Errorf("%s: requests with no SRQs (-want +got):\n%s", dev.Name, diff)
				}
			}
			if onSRQ == 0 {
				t.Error("no QP of the recordings is on an SRQ: the join went untested")
			}
		})
	}
}

// An SRQ dump that skipped malformed entries, or a kernel without SRQ
// dumps, still lets a QP dump join (what decoded, or nothing); a device
// gone or a refusal does not.
func TestSRQJoinable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"partial", &PartialError{Op: "dump SRQs of rxe0", Skipped: 1, First: errMissing("SRQN")}, true},
		{"no SRQ dump", &Error{Op: "dump SRQs of rxe0", Err: unix.EOPNOTSUPP}, true},
		{"device gone", &Error{Op: "dump SRQs of rxe0", Err: ErrNoDevice}, false},
		{"refused", &Error{Op: "dump SRQs of rxe0", Err: unix.EPERM}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SRQJoinable(tt.err); got != tt.want {
				t.Errorf("SRQJoinable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// qpMessage builds one QP dump message for rxe0 with the given entries.
func qpMessage(entries ...[]netlink.Attribute) netlink.Message {
	var table []netlink.Attribute
	for _, e := range entries {
		table = append(table, netlink.Attribute{Type: attrResQPEntry, Data: nltest.MustMarshalAttributes(e)})
	}
	return netlink.Message{
		Header: netlink.Header{Type: msgType(cmdResQPGet)},
		Data: nltest.MustMarshalAttributes([]netlink.Attribute{
			{Type: attrDevIndex, Data: u32(0)},
			{Type: attrDevName, Data: []byte("rxe0\x00")},
			{Type: attrResQP, Data: nltest.MustMarshalAttributes(table)},
		}),
	}
}

func u32(v uint32) []byte { return le32(v) }

func qpEntry(lqpn uint32, state uint8, extra ...netlink.Attribute) []netlink.Attribute {
	return append([]netlink.Attribute{
		{Type: attrResLQPN, Data: le32(lqpn)},
		{Type: attrResType, Data: []byte{uint8(QPTypeRC)}},
		{Type: attrResState, Data: []byte{state}},
		{Type: attrResPID, Data: le32(42)},
	}, extra...)
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// dumpClient answers every QP dump with msgs, counting requests; SRQ dumps
// get an empty answer.
func dumpClient(t *testing.T, requests *int, msgs func(attempt int) []netlink.Message) *Client {
	t.Helper()
	conn := nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
		if uint16(req[0].Header.Type)&0x3ff == cmdResSRQGet {
			return dumpReply(nil, req[0].Header.Sequence)
		}
		*requests++
		return dumpReply(msgs(*requests), req[0].Header.Sequence)
	})
	c := newClient(conn)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestQPDumpNewerKernel(t *testing.T) {
	// An attribute number and a QP state this rdmatool does not know.
	var n int
	c := dumpClient(t, &n, func(int) []netlink.Message {
		return []netlink.Message{qpMessage(qpEntry(17, 9, netlink.Attribute{Type: 250, Data: []byte{1, 2, 3, 4}}))}
	})
	got := collect(t, c.QPs(t.Context(), Device{Name: "rxe0"}, DumpOptions{}))
	if len(got) != 1 || got[0].LQPN != 17 || got[0].State.String() != "unknown(9)" || got[0].Owner.PID != 42 {
		t.Errorf("got %+v, want QP 17 in state unknown(9)", got)
	}
}

func TestQPDumpDeduplicates(t *testing.T) {
	// The kernel restarts a dump by position: an entry can come twice.
	var n int
	c := dumpClient(t, &n, func(int) []netlink.Message {
		return []netlink.Message{
			qpMessage(qpEntry(17, 3), qpEntry(18, 3)),
			qpMessage(qpEntry(18, 3), qpEntry(19, 6)),
		}
	})
	var lqpns []uint32
	for _, q := range collect(t, c.QPs(t.Context(), Device{Name: "rxe0"}, DumpOptions{})) {
		lqpns = append(lqpns, q.LQPN)
	}
	if want := []uint32{17, 18, 19}; !slices.Equal(lqpns, want) {
		t.Errorf("QPs = %v, want %v", lqpns, want)
	}
}

func TestQPDumpInterrupted(t *testing.T) {
	tests := []struct {
		name         string
		interrupted  int // how many attempts the kernel flags
		wantRequests int
		wantErr      error
	}{
		{"clean", 0, 1, nil},
		{"once", 1, 2, nil},
		{"always", 100, maxDumpRetries + 1, ErrDumpInterrupted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n int
			c := dumpClient(t, &n, func(attempt int) []netlink.Message {
				m := qpMessage(qpEntry(uint32(16+attempt), 3))
				if attempt <= tt.interrupted {
					m.Header.Flags |= netlink.DumpInterrupted
				}
				return []netlink.Message{m}
			})
			var err error
			var got int
			for _, e := range c.QPs(t.Context(), Device{Name: "rxe0"}, DumpOptions{}) {
				if e != nil {
					err = e
					continue
				}
				got++
			}
			if n != tt.wantRequests || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("requests %d err %v, want %d and %v", n, err, tt.wantRequests, tt.wantErr)
			}
			if got != n {
				t.Errorf("yielded %d QPs over %d attempts, want one new QP per attempt", got, n)
			}
		})
	}
}

func TestQPDumpMalformedEntry(t *testing.T) {
	var n int
	c := dumpClient(t, &n, func(int) []netlink.Message {
		bad := qpEntry(18, 3)
		bad[2].Data = []byte{1, 2} // u8 attribute with two bytes
		noLQPN := qpEntry(19, 3)[1:]
		return []netlink.Message{qpMessage(qpEntry(17, 3), bad, noLQPN, qpEntry(20, 3))}
	})
	var got []uint32
	var partial *PartialError
	for q, err := range c.QPs(t.Context(), Device{Name: "rxe0"}, DumpOptions{}) {
		if err != nil {
			if !errors.As(err, &partial) {
				t.Fatalf("unexpected error %v", err)
			}
			continue
		}
		got = append(got, q.LQPN)
	}
	if !slices.Equal(got, []uint32{17, 20}) || partial == nil || partial.Skipped != 2 {
		t.Errorf("got QPs %v and %v; want 17, 20 and two skipped entries", got, partial)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		errno unix.Errno
		want  []error
	}{
		{unix.EPERM, []error{os.ErrPermission}},
		{unix.EEXIST, []error{os.ErrExist}},
		{unix.ENODEV, []error{ErrNoDevice, os.ErrNotExist}},
		{unix.EOPNOTSUPP, []error{ErrNotSupported}},
	}
	for _, tt := range tests {
		t.Run(tt.errno.Error(), func(t *testing.T) {
			conn := nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
				msgs, err := nltest.Error(int(tt.errno), req)
				for i := range msgs {
					msgs[i].Header.Flags = 0 // see STYLE.md: NLM_F_MATCH reads as ACK_TLVS
				}
				return msgs, err
			})
			c := newClient(conn)
			defer c.Close()
			err := c.Rename(t.Context(), Device{Index: 3, Name: "mlx5_0"}, "fab0")
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("Rename error %v does not match %v", err, w)
				}
			}
			if want := "rdmanl: rename mlx5_0 to fab0: "; err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want prefix %q", err, want)
			}
		})
	}
}

// The kernel's SET and DELLINK doits and the resource dumps answer EINVAL
// for an index no device has: a device deleted under a rename, a delete or
// a dump is then ErrNoDevice,
// while an EINVAL about a listed device stays what it is.
func TestGoneDeviceIsErrNoDevice(t *testing.T) {
	devDump := readRecorded(t, filepath.Join("testdata", recordedName("dev-dump", "6.12", ""))) // indices 0 and 1
	dial := func() (*netlink.Conn, error) {
		return nltest.Dial(func(req []netlink.Message) ([]netlink.Message, error) {
			if uint16(req[0].Header.Type)&0x3ff == cmdGet {
				return dumpReply(devDump, req[0].Header.Sequence)
			}
			msgs, err := nltest.Error(int(unix.EINVAL), req)
			for i := range msgs {
				msgs[i].Header.Flags = 0
			}
			return msgs, err
		}), nil
	}
	conn, _ := dial()
	c := newClient(conn)
	c.redial = dial // a failed dump leaves the socket to be replaced, as Dial's client does
	defer c.Close()
	dumpQPs := func(d Device) error {
		for _, err := range c.QPs(t.Context(), d, DumpOptions{NoSRQJoin: true}) {
			return err
		}
		return nil
	}
	tests := []struct {
		name   string
		call   func(Device) error
		dev    Device
		gone   bool
		prefix string
	}{
		{"rename of a deleted device", func(d Device) error { return c.Rename(t.Context(), d, "fab0") }, Device{Index: 7, Name: "rxe7"}, true, "rdmanl: rename rxe7 to fab0: no such RDMA device"},
		{"rename of a listed device", func(d Device) error { return c.Rename(t.Context(), d, "fab0") }, Device{Index: 1, Name: "siw0"}, false, "rdmanl: rename siw0 to fab0: invalid argument"},
		{"delete of a deleted device", func(d Device) error { return c.LinkDelete(t.Context(), d) }, Device{Index: 7, Name: "rxe7"}, true, "rdmanl: delete link rxe7: no such RDMA device"},
		{"delete of a listed device", func(d Device) error { return c.LinkDelete(t.Context(), d) }, Device{Index: 0, Name: "rxe0"}, false, "rdmanl: delete link rxe0: invalid argument"},
		{"dump of a deleted device", dumpQPs, Device{Index: 7, Name: "rxe7"}, true, "rdmanl: dump QPs of rxe7: no such RDMA device"},
		{"dump of a listed device", dumpQPs, Device{Index: 1, Name: "siw0"}, false, "rdmanl: dump QPs of siw0: invalid argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(tt.dev)
			if got := errors.Is(err, ErrNoDevice) && errors.Is(err, os.ErrNotExist); got != tt.gone {
				t.Errorf("error %v matches ErrNoDevice and os.ErrNotExist: %v, want %v", err, got, tt.gone)
			}
			if err == nil || err.Error() != tt.prefix {
				t.Errorf("error %q, want %q", err, tt.prefix)
			}
		})
	}
}

func TestRenameRequest(t *testing.T) {
	conn := nltest.Dial(nltest.CheckRequest(
		[]netlink.HeaderType{msgType(cmdSet)}, []netlink.HeaderFlags{netlink.Request | netlink.Acknowledge},
		func(req []netlink.Message) ([]netlink.Message, error) {
			want := nltest.MustMarshalAttributes([]netlink.Attribute{
				{Type: attrDevIndex, Data: le32(3)},
				{Type: attrDevName, Data: []byte("fab0\x00")},
			})
			if diff := cmp.Diff(want, req[0].Data); diff != "" {
				t.Errorf("request attributes (-want +got):\n%s", diff)
			}
			return nltest.Error(0, req)
		}))
	c := newClient(conn)
	defer c.Close()
	if err := c.Rename(t.Context(), Device{Index: 3, Name: "mlx5_0"}, "fab0"); err != nil {
		t.Fatal(err)
	}
}

func TestGUIDString(t *testing.T) {
	tests := []struct {
		g    GUID
		want string
	}{
		{0x0002c90300a1b2c3, "0002:c903:00a1:b2c3"},
		{0, "0000:0000:0000:0000"},
		{0xffffffffffffffff, "ffff:ffff:ffff:ffff"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(tt.g); got != tt.want {
			t.Errorf("GUID(%#x) = %s, want %s", uint64(tt.g), got, tt.want)
		}
	}
}

func TestGUIDText(t *testing.T) {
	for _, s := range []string{"0002:c903:00a1:b2c3", "0000:00ff:fe00:0101", "ffff:ffff:ffff:ffff"} {
		var g GUID
		if err := g.UnmarshalText([]byte(s)); err != nil || g.String() != s {
			t.Errorf("UnmarshalText(%q) = %s, %v", s, g, err)
		}
	}
	for _, s := range []string{"", "0002:c903:00a1", "0002:c903:00a1:b2c", "0002:c903:00a1:b2c3:0000", "0x0002c90300a1b2c3", "000g:0000:0000:0000", "+002:0000:0000:0000"} {
		var g GUID
		if err := g.UnmarshalText([]byte(s)); err == nil {
			t.Errorf("UnmarshalText(%q) = %s, want an error", s, g)
		}
	}
}
