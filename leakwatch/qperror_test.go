package leakwatch

import (
	"strings"
	"testing"
	"time"
	"unique"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// asyncErr is the provider's async error name for QP qpn at t.
func asyncErr(t time.Time, dev rdmanl.Device, qpn uint32, name string) Event {
	e := ev(t, EventQPAsync, dev, qpn)
	e.Async = name
	return e
}

// cycle is one reconnect cycle of a pair (QPs qpn and qpn+1) of the
// owner with pid: created and connected at t, the target's QP failed
// with failure ("" for none) 100 ms on, both moved to Error by the
// consumer 200 ms on and destroyed 300 ms on. Failure "provider" is a
// failure without an event: the consumer's modify finds the target's QP
// in Error (the provider says so).
func cycle(w *Watcher, t time.Time, qpn, pid uint32, failure string) {
	for q := qpn; q <= qpn+1; q++ {
		c := create(t, rxe, q, false)
		c.PID, c.TID = pid, pid
		w.Event(c)
		w.Event(modify(t, rxe, q, rdmanl.QPStateRTS))
	}
	if failure != "" && failure != "provider" {
		w.Event(asyncErr(t.Add(100*time.Millisecond), rxe, qpn+1, failure))
	}
	for q := qpn; q <= qpn+1; q++ {
		m := modify(t.Add(200*time.Millisecond), rxe, q, rdmanl.QPStateErr)
		m.CurState, m.HasCurState = rdmanl.QPStateRTS, true
		if failure == "provider" && q == qpn+1 {
			m.CurState = rdmanl.QPStateErr
		}
		w.Event(m)
		w.Event(ev(t.Add(300*time.Millisecond), EventQPDestroyed, rxe, q))
	}
}

func errorCounts(w *Watcher) map[string]uint64 {
	out := map[string]uint64{}
	for _, de := range w.QPErrors() {
		for _, c := range de.Counts {
			out[de.Name+" "+c.Cause.String()] += c.Count
		}
	}
	return out
}

// Each entry into Error counts once, under the first cause seen: the
// async error before the consumer's modify, the modify alone, a scan's
// Error that no probe saw set (provider), the same without probes
// (unknown); a QP that left Error and entered it again counts again; a
// QP first seen in Error does not count.
func TestQPErrorCauses(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(dump(c.at(0), rxe, qp(9, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
	cycle(w, c.at(time.Second), 10, 42, "QP_ACCESS_ERR")
	cycle(w, c.at(2*time.Second), 12, 42, "")
	cycle(w, c.at(3*time.Second), 14, 42, "QP_FATAL")
	cycle(w, c.at(4*time.Second), 16, 42, "PATH_MIG") // not an error that moves the QP
	cycle(w, c.at(4500*time.Millisecond), 18, 42, "provider")
	// QP 20 in RTS; the provider moves it to Error, a later dump says so.
	w.Event(create(c.at(5*time.Second), rxe, 20, false))
	w.Event(modify(c.at(5*time.Second), rxe, 20, rdmanl.QPStateRTS))
	w.Scan(dump(c.at(10*time.Second), rxe, qp(9, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42), qp(20, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
	// Back to RESET and into Error again: a second entry.
	w.Event(modify(c.at(11*time.Second), rxe, 20, rdmanl.QPStateReset))
	w.Event(modify(c.at(12*time.Second), rxe, 20, rdmanl.QPStateErr))
	w.Event(modify(c.at(12*time.Second), rxe, 20, rdmanl.QPStateErr)) // the same entry
	want := map[string]uint64{"rxe0 modify": 8, "rxe0 QP_ACCESS_ERR": 1, "rxe0 QP_FATAL": 1, "rxe0 provider": 2}
	if diff := cmp.Diff(want, errorCounts(w)); diff != "" {
		t.Errorf("errors by cause (-want +got):\n%s", diff)
	}
	if ev := w.qps[qpKey{0, 20}].Evidence(); !strings.Contains(evidenceText(ev), "entered Error: provider") {
		t.Errorf("QP 20's evidence %v: want its entry into Error", ev)
	}

	// Without probes, a scan's Error is of unknown cause.
	w = New(Config{}, c.now)
	w.Scan(dump(c.at(0), siw, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42)))
	w.Scan(dump(c.at(30*time.Second), siw, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
	w.Scan(dump(c.at(60*time.Second), siw, qp(3, rdmanl.QPTypeRC, rdmanl.QPStateErr, 42)))
	if diff := cmp.Diff(map[string]uint64{"siw0 unknown": 1}, errorCounts(w)); diff != "" {
		t.Errorf("errors by cause without probes (-want +got):\n%s", diff)
	}
}

func evidenceText(ev []Evidence) string {
	var b strings.Builder
	for _, e := range ev {
		b.WriteString(e.What + "\n")
	}
	return b.String()
}

func TestQPErrorStormThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		failures []string      // one cycle each, a second apart
		every    time.Duration // between cycles
		now      time.Duration
		want     int // findings
	}{
		{"none", Config{}, nil, time.Second, time.Minute, 0},
		{"4 failed cycles", Config{}, repeat("QP_ACCESS_ERR", 4), time.Second, time.Minute, 0},
		{"5 failed cycles", Config{}, repeat("QP_ACCESS_ERR", 5), time.Second, time.Minute, 1},
		{"5 cycles, one healthy", Config{}, []string{"QP_ACCESS_ERR", "QP_ACCESS_ERR", "", "QP_ACCESS_ERR", "QP_ACCESS_ERR"}, time.Second, time.Minute, 0},
		{"disconnects only", Config{}, repeat("", 20), time.Second, time.Minute, 0},
		{"5 failed cycles without events", Config{}, repeat("provider", 5), time.Second, time.Minute, 1},
		{"5 failed cycles, the first out of the window", Config{}, repeat("QP_FATAL", 5), time.Minute, 5*time.Minute + time.Second, 0},
		{"3 with a threshold of 3", Config{ErrorStormCycles: 3, ErrorStormWindow: time.Minute}, repeat("QP_REQ_ERR", 3), time.Second, 10 * time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			w := New(Config{Probes: true, ErrorStormCycles: tt.cfg.ErrorStormCycles, ErrorStormWindow: tt.cfg.ErrorStormWindow}, c.now)
			w.Scan(scan(c.at(0), rxe))
			for i, f := range tt.failures {
				cycle(w, c.at(time.Duration(i)*tt.every), uint32(10+2*i), 42, f)
			}
			c.at(tt.now)
			rep := w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
			if len(rep.Findings) != tt.want {
				t.Fatalf("%d findings %+v, want %d", len(rep.Findings), rep.Findings, tt.want)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// A storm's finding names the device and the owner (one finding per
// owner: another process failing once is not in it), the failures, their
// rate and causes, the cycles, the replacements and the site; error
// severity. QPs that fail together (a controller's queues) are one cycle.
func TestQPErrorStormEvidence(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), rxe))
	for i := range 6 {
		at := c.at(time.Duration(i) * 10 * time.Second)
		cycle(w, at, uint32(100+2*i), 42, "QP_ACCESS_ERR")
		if i == 3 {
			cycle(w, at, 300, 43, "QP_FATAL") // another owner, once
		}
	}
	// Eight QPs of a kernel ULP fail together, twice: two cycles.
	for round := range 2 {
		at := c.at(time.Duration(70+round*10) * time.Second)
		for q := range uint32(8) {
			k := create(at, rxe, 400+uint32(round)*8+q, false)
			k.KernOwner, k.PID, k.TID, k.Comm = "rdma_cm", 0, 0, ""
			w.Event(k)
		}
		for q := range uint32(8) {
			w.Event(asyncErr(at.Add(time.Second), rxe, 400+uint32(round)*8+q, "QP_FATAL"))
		}
	}
	// Dumps of the rdma_cm IDs named the peers of all but the last
	// failed QP (the targets': 101, 103, ...), after they failed; an MR
	// dump came after the last failure.
	w.Peers(rxe.Index, map[uint32]string{100: "192.0.2.1", 101: "192.0.2.1", 103: "192.0.2.1", 105: "192.0.2.1", 107: "192.0.2.1", 109: "192.0.2.7"})
	w.ScanMRs(mrDump(c.at(100*time.Second), rxe, mrsOf(42, 5, 4)...))
	c.at(2 * time.Minute)
	rep := w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v, want one", rep.Findings)
	}
	f := rep.Findings[0]
	if f.Rule != RuleQPErrorStorm || f.Severity != SeverityError || f.Device != "rxe0" || f.Comm != "app" || f.Count != 6 || f.Peer != "192.0.2.1" {
		t.Errorf("finding %+v: want an error on rxe0 for app, count 6, peer 192.0.2.1", f)
	}
	want := []string{
		"6 QPs failed into Error in 5m0s (1.2 a minute) over 6 reconnect cycles: QP_ACCESS_ERR 6",
		"5 of them created after the first Error (replacements that failed in turn)",
		"peers (rdma_cm) of 5 of the 6 failed QPs: 192.0.2.1 4, 192.0.2.7 1",
		"R_Keys the owner held when its QPs failed, at the last MR dump (49.9s after the last failure): 4 MRs (16 KiB), the oldest 3: MR 5 R_Key 0x1005, MR 6 R_Key 0x1006, MR 7 R_Key 0x1007; " + untoldKeys,
		"last: QP 111 entered Error (QP_ACCESS_ERR)",
	}
	var got []string
	for _, e := range f.Evidence {
		got = append(got, e.What)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("evidence (-want +got):\n%s", diff)
	}
	if !strings.Contains(f.Hint, "R_Key") {
		t.Errorf("hint %q says nothing of R_Keys", f.Hint)
	}
	kept := &w.devs[0].qpErrors
	if got := reconnectCycles(kept.window(kept.len() - 16)); got != 2 {
		t.Errorf("two rounds of 8 QPs failing together: %d cycles, want 2", got)
	}

	// Without the probes the rule is skipped with their reason.
	w.SetProbes(false, "no BTF")
	rep = w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
	if len(rep.Findings) != 0 || len(rep.SkippedRules) != 1 || rep.SkippedRules[0].Reason != "needs the eBPF probes: no BTF" {
		t.Errorf("without probes: %+v, skipped %+v", rep.Findings, rep.SkippedRules)
	}
}

// The QPs of one process are one owner whether or not a scan listed them
// (and /proc gave their cgroup): a storm of five cycles, one of which a
// scan saw, is one finding, with the cgroup.
func TestQPErrorStormOneProcess(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), rxe))
	for i := range 5 {
		at := c.at(time.Duration(1+i) * 10 * time.Second)
		q := uint32(10 + 2*i)
		for k := q; k <= q+1; k++ {
			w.Event(create(at, rxe, k, false))
			w.Event(modify(at, rxe, k, rdmanl.QPStateRTS))
		}
		if i == 2 {
			s := scan(at.Add(50*time.Millisecond), rxe, qp(q, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42), qp(q+1, rdmanl.QPTypeRC, rdmanl.QPStateRTS, 42))
			s.Devices[0].Owners = map[uint32]Owner{42: {TGID: 42, Comm: "app", Cgroup: "/system.slice/app.service"}}
			w.Scan(s)
		}
		w.Event(asyncErr(at.Add(100*time.Millisecond), rxe, q+1, "QP_ACCESS_ERR"))
		for k := q; k <= q+1; k++ {
			w.Event(modify(at.Add(200*time.Millisecond), rxe, k, rdmanl.QPStateErr))
			w.Event(ev(at.Add(300*time.Millisecond), EventQPDestroyed, rxe, k))
		}
	}
	c.at(2 * time.Minute)
	rep := w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v, want one", rep.Findings)
	}
	if f := rep.Findings[0]; f.Count != 5 || f.TGID != 42 || f.Cgroup != "/system.slice/app.service" {
		t.Errorf("finding %+v: want count 5 for process 42 with its cgroup", f)
	}
}

// A kernel ULP's QPs that rdma_cm creates and ends between scans, as RDS
// makes them when it reconnects, belong to the ULP their creation stacks
// name: one storm for rds_rdma, none for rdma_cm, and another ULP's QPs
// (nvme_rdma, failing once) are not in it.
func TestQPErrorStormKernelULP(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	kernCreate := func(at time.Time, q uint32, stack ...string) {
		e := create(at, rxe, q, false)
		e.KernOwner, e.PID, e.TID, e.Comm = "rdma_cm", 0, 0, ""
		e.Site = Site{Stack: stack}
		w.Event(e)
		w.Event(modify(at, rxe, q, rdmanl.QPStateRTS))
	}
	fail := func(at time.Time, q uint32) {
		w.Event(asyncErr(at.Add(100*time.Millisecond), rxe, q, "QP_ACCESS_ERR"))
		w.Event(modify(at.Add(200*time.Millisecond), rxe, q, rdmanl.QPStateErr))
		w.Event(ev(at.Add(300*time.Millisecond), EventQPDestroyed, rxe, q))
	}
	for i := range 6 {
		at := c.at(time.Duration(1+i) * 10 * time.Second)
		q := uint32(10 + 2*i)
		kernCreate(at, q, "ib_create_qp_kernel+0x5d [ib_core]", "rdma_create_qp+0x1f [rdma_cm]", "rds_ib_setup_qp+0x2c0 [rds_rdma]")
		fail(at, q)
	}
	at := c.at(90 * time.Second)
	kernCreate(at, 100, "rdma_create_qp+0x1f [rdma_cm]", "nvme_rdma_create_queue_ib+0x1f0 [nvme_rdma]")
	fail(at, 100)
	c.at(2 * time.Minute)
	rep := w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v, want one", rep.Findings)
	}
	if f := rep.Findings[0]; f.KernName != "rdma_cm" || f.ULP != "rds_rdma" || f.Count != 6 {
		t.Errorf("finding %+v: want rdma_cm's QPs for rds_rdma, count 6", f)
	}
}

// A storm's evidence says which R_Keys its owner held as far as the MR
// dumps know: none made yet, none of the owner's MRs listed, the keys
// without CAP_NET_ADMIN, and when the dump was against the failures.
func TestQPErrorStormKeys(t *testing.T) {
	t.Parallel()
	noKeys := mrsOf(44, 5, 2) // a thread of process 42
	for i := range noKeys {
		noKeys[i].RKey, noKeys[i].LKey, noKeys[i].HasKeys = 0, 0, false
	}
	tests := []struct {
		name string
		dump *MRDump       // nil: none
		at   time.Duration // when the dump ended
		want string
	}{
		{"no MR dump", nil, 0, "R_Keys the owner held when its QPs failed: not known, no MR dump of rxe0 yet"},
		{"none of the owner's", mrDump(t0, rxe, mrsOf(43, 1, 2)...), 30 * time.Second,
			"R_Keys the owner held when its QPs failed: none, it had no MRs on rxe0 at the last MR dump (between the first failure and the last)"},
		{"without CAP_NET_ADMIN", mrDump(t0, rxe, noKeys...), 30 * time.Second,
			"R_Keys the owner held when its QPs failed, at the last MR dump (between the first failure and the last): 2 MRs (8 KiB): MR 5, MR 6 (their keys need CAP_NET_ADMIN); " + untoldKeys},
		{"before the failures", mrDump(t0, rxe, mrsOf(42, 9, 1)...), 0,
			"R_Keys the owner held when its QPs failed, at the last MR dump (10.1s before the first failure): 1 MR (4 KiB): MR 9 R_Key 0x1009; " + untoldKeys},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &clock{t: t0}
			w := New(Config{Probes: true}, c.now)
			w.Scan(scan(c.at(0), rxe))
			dumped := false
			for i := range 6 {
				at := c.at(time.Duration(1+i) * 10 * time.Second)
				if tt.dump != nil && !dumped && tt.at < at.Sub(t0) {
					tt.dump.Time, dumped = t0.Add(tt.at), true
					w.ScanMRs(tt.dump)
				}
				cycle(w, at, uint32(100+2*i), 42, "QP_ACCESS_ERR")
			}
			c.at(2 * time.Minute)
			rep := w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
			if len(rep.Findings) != 1 {
				t.Fatalf("findings %+v, want one", rep.Findings)
			}
			var got []string
			for _, e := range rep.Findings[0].Evidence {
				if strings.HasPrefix(e.What, "R_Keys ") {
					got = append(got, e.What)
				}
			}
			if diff := cmp.Diff([]string{tt.want}, got); diff != "" {
				t.Errorf("R_Keys evidence (-want +got):\n%s", diff)
			}
		})
	}
}

// A storm names its failed QPs' peers the most frequent first (then by
// address), at most five, the rest counted, and how many had one.
func TestStormPeers(t *testing.T) {
	t.Parallel()
	errsOf := func(peers ...string) []qpError {
		var out []qpError
		for _, p := range peers {
			out = append(out, qpError{names: unique.Make(qpNames{device: "rxe0"}), peer: peerFrom(p)})
		}
		return out
	}
	tests := []struct {
		name      string
		errs      []qpError
		top, what string
	}{
		{"none known", errsOf("", ""), "", "peers: no failed QP's rdma_cm peer is known (no rdma_cm ID named one: QPs not connected through rdma_cm, or gone before a dump of the rdma_cm IDs saw them)"},
		{"one", errsOf("192.0.2.1", "", "192.0.2.1"), "192.0.2.1", "peers (rdma_cm) of 2 of the 3 failed QPs: 192.0.2.1 2"},
		{"seven", errsOf("192.0.2.9", "192.0.2.9", "192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5", "192.0.2.6", "192.0.2.6"), "192.0.2.6",
			"peers (rdma_cm) of 9 of the 9 failed QPs: 192.0.2.6 2, 192.0.2.9 2, 192.0.2.1 1, 192.0.2.2 1, 192.0.2.3 1, and 2 more peers with 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			top, what := stormPeers(tt.errs)
			if top != tt.top || what != tt.what {
				t.Errorf("stormPeers = %q, %q; want %q, %q", top, what, tt.top, tt.what)
			}
		})
	}
}

// A busy neighbour hides no storm: one process tears down 1,000 healthy
// QPs a second for a minute (60,000 modifies to Error from RTS, each QP
// then destroyed) while another's reconnect loop fails every 10 s, by
// QP_ACCESS_ERR or by the provider without an event (the consumer's
// modify finds the QP in Error). qp-error-storm names the failing process
// and only it, with every failure it had (not "at least": the teardowns
// push none out), and every entry is counted by cause, the teardowns as
// modifies.
func TestQPErrorStormBusyNeighbour(t *testing.T) {
	t.Parallel()
	const (
		teardowns = 60_000 // 1,000 a second for a minute
		storm     = 77
		cycles    = 6
	)
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), rxe))
	stormEvent := func(e Event) {
		e.PID, e.TID, e.Comm = storm, storm, "storm"
		w.Event(e)
	}
	for i := range teardowns {
		at := c.at(time.Duration(i) * time.Millisecond)
		q := uint32(1000 + i)
		w.Event(create(at, rxe, q, false))
		w.Event(modify(at, rxe, q, rdmanl.QPStateRTS))
		m := modify(at, rxe, q, rdmanl.QPStateErr)
		m.CurState, m.HasCurState = rdmanl.QPStateRTS, true
		w.Event(m)
		w.Event(ev(at, EventQPDestroyed, rxe, q))
		// The storm's cycle n is a pair (QPs 10+2n and 11+2n) created
		// at 5 s + 10n s; the target's QP fails 100 ms on.
		n := uint32(i / 10_000)
		pair := []uint32{10 + 2*n, 11 + 2*n}
		switch i % 10_000 {
		case 5_000:
			for _, q := range pair {
				stormEvent(create(at, rxe, q, false))
				stormEvent(modify(at, rxe, q, rdmanl.QPStateRTS))
			}
		case 5_100:
			if n%2 == 0 {
				stormEvent(asyncErr(at, rxe, pair[1], "QP_ACCESS_ERR"))
			}
		case 5_200:
			for _, q := range pair {
				m := modify(at, rxe, q, rdmanl.QPStateErr)
				m.CurState, m.HasCurState = rdmanl.QPStateRTS, true
				if q == pair[1] && n%2 == 1 {
					m.CurState = rdmanl.QPStateErr // the provider's, without an event
				}
				stormEvent(m)
			}
		case 5_300:
			for _, q := range pair {
				stormEvent(ev(at, EventQPDestroyed, rxe, q))
			}
		}
	}
	c.at(61 * time.Second)
	want := map[string]uint64{"rxe0 modify": teardowns + cycles, "rxe0 QP_ACCESS_ERR": cycles / 2, "rxe0 provider": cycles / 2}
	if diff := cmp.Diff(want, errorCounts(w)); diff != "" {
		t.Errorf("errors by cause (-want +got):\n%s", diff)
	}
	rep := w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
	if len(rep.Findings) != 1 {
		t.Fatalf("qp-error-storm findings %+v, want one for process %d", rep.Findings, storm)
	}
	f := rep.Findings[0]
	if f.TGID != storm || f.Comm != "storm" || f.Device != "rxe0" || f.Count != cycles {
		t.Errorf("finding %+v: want process %d (storm) on rxe0, count %d", f, storm, cycles)
	}
	if want := "6 QPs failed into Error in 5m0s (1.2 a minute) over 6 reconnect cycles: QP_ACCESS_ERR 3, provider 3"; f.Evidence[0].What != want {
		t.Errorf("evidence %q, want %q", f.Evidence[0].What, want)
	}
}

// A device keeps its newest MaxQPErrors failures: a storm whose window
// reaches back past the oldest kept counts "at least" them, one whose
// window begins after it counts exactly.
func TestQPErrorStormBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		window time.Duration
		want   string
		count  uint64
	}{
		{"the window reaches past the oldest kept", 5 * time.Minute, "at least 1024 QPs failed into Error in 5m0s", MaxQPErrors},
		{"the window begins after it", 5 * time.Second, "500 QPs failed into Error in 5s", 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: t0}
			w := New(Config{Probes: true, ErrorStormWindow: tt.window}, c.now)
			w.Scan(scan(c.at(0), rxe))
			for i := range MaxQPErrors + 76 { // 1,100 QPs, one failing every 10 ms
				at := c.at(time.Duration(i) * 10 * time.Millisecond)
				w.Event(create(at, rxe, uint32(10+i), false))
				w.Event(asyncErr(at, rxe, uint32(10+i), "QP_FATAL"))
			}
			c.at(11 * time.Second)
			rep := w.Evaluate(Query{Rules: []string{RuleQPErrorStorm}})
			if len(rep.Findings) != 1 {
				t.Fatalf("findings %+v, want one", rep.Findings)
			}
			if f := rep.Findings[0]; f.Count != tt.count || !strings.HasPrefix(f.Evidence[0].What, tt.want) {
				t.Errorf("count %d, evidence %q: want %d, %q", f.Count, f.Evidence[0].What, tt.count, tt.want)
			}
		})
	}
}
