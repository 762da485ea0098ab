package leakwatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// mrsOf are n MRs of 4 KiB of the owner pid (a thread), numbered from
// first, with keys.
func mrsOf(pid, first, n uint32) []rdmanl.MR {
	out := make([]rdmanl.MR, 0, n)
	for mrn := first; mrn < first+n; mrn++ {
		out = append(out, rdmanl.MR{MRN: mrn, RKey: 0x1000 + mrn, LKey: 0x2000 + mrn, HasKeys: true, Len: 4096, Owner: rdmanl.Owner{PID: pid}})
	}
	return out
}

// mrDump is a dump of dev that ended at t listing mrs; /proc names
// threads 42 and 44 as process 42 (app), 43 as process 43 (other).
func mrDump(t time.Time, dev rdmanl.Device, mrs ...rdmanl.MR) *MRDump {
	d := &MRDump{Device: dev, Time: t, Owners: map[uint32]Owner{42: {TGID: 42, Comm: "app"}, 43: {TGID: 43, Comm: "other"}, 44: {TGID: 42, Comm: "app"}}}
	for _, m := range mrs {
		d.Add(m)
	}
	return d
}

// loop is a consumer's reconnect loop on rxe0: process 42, whose own MR
// (number 1) is registered before the first cycle.
type loop struct {
	cycles int
	every  time.Duration // between cycles, the first at 1s
	// leak keeps each connection's MR registered; keepQPs keeps each
	// connection's QPs (more connections, not reconnects); kernel makes
	// the consumer nvme_rdma, whose QPs rdma_cm creates.
	leak, keepQPs, kernel bool
}

// run runs the loop on w: each cycle creates a pair of QPs and registers
// an MR for the connection, then ends the connection before (its QPs
// destroyed, its MR deregistered unless leak); an MR dump follows each
// cycle. It returns the MRs the consumer has at the end.
func (l loop) run(w *Watcher, c *clock) []rdmanl.MR {
	w.Scan(scan(c.at(0), rxe))
	own := mrsOf(42, 1, 1)
	if l.kernel {
		own[0].Owner = rdmanl.Owner{KernName: "nvme_rdma"}
	}
	w.ScanMRs(mrDump(c.at(0), rxe)) // before the consumer
	live := own
	for i := range l.cycles {
		at := c.at(time.Second + time.Duration(i)*l.every)
		qpn := uint32(100 + 2*i)
		for q := qpn; q <= qpn+1; q++ {
			e := create(at, rxe, q, false)
			if l.kernel {
				e.KernOwner, e.PID, e.TID, e.Comm = "rdma_cm", 0, 0, ""
				e.Site = Site{Stack: []string{"ib_create_qp_kernel+0x5d [ib_core]", "rdma_create_qp+0x1f [rdma_cm]", "nvme_rdma_create_queue_ib+0x1f0 [nvme_rdma]"}}
			} else {
				e.Site = Site{Call: "app!connect_peer+0x4c", Via: "rdma_create_qp", File: "/usr/bin/app"}
			}
			w.Event(e)
			w.Event(modify(at, rxe, q, rdmanl.QPStateRTS))
		}
		if i > 0 && !l.keepQPs {
			for q := qpn - 2; q <= qpn-1; q++ {
				w.Event(ev(at, EventQPDestroyed, rxe, q))
			}
		}
		mr := mrsOf(44, uint32(10+i), 1)[0]
		mr.Owner = own[0].Owner
		if !l.leak && !l.keepQPs {
			live = live[:1]
		}
		live = append(live, mr)
		w.ScanMRs(mrDump(at.Add(500*time.Millisecond), rxe, live...))
	}
	return live
}

func TestMRLeakThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       Config
		loop      loop
		now       time.Duration
		wantCount uint64 // MRs now; 0: no finding
	}{
		{"none", Config{}, loop{}, time.Minute, 0},
		{"4 connections, each MR kept", Config{}, loop{cycles: 4, every: 5 * time.Second, leak: true}, time.Minute, 5},
		{"3 connections, each MR kept", Config{}, loop{cycles: 3, every: 5 * time.Second, leak: true}, time.Minute, 0},
		{"20 connections, each MR deregistered", Config{}, loop{cycles: 20, every: 5 * time.Second}, 2 * time.Minute, 0},
		{"4 connections kept, each with its MR", Config{}, loop{cycles: 4, every: 5 * time.Second, leak: true, keepQPs: true}, time.Minute, 0},
		{"4 connections of a kernel ULP through rdma_cm", Config{}, loop{cycles: 4, every: 5 * time.Second, leak: true, kernel: true}, time.Minute, 5},
		{"3 kept, the first out of the window", Config{}, loop{cycles: 3, every: 3 * time.Minute, leak: true}, 10*time.Minute + 2*time.Second, 0},
		{"4 kept, the first out of the window", Config{}, loop{cycles: 4, every: 3 * time.Minute, leak: true}, 10*time.Minute + 2*time.Second, 5},
		{"5 with a growth of 5", Config{MRLeakGrowth: 5}, loop{cycles: 5, every: time.Second, leak: true}, time.Minute, 0},
		{"5 with a growth of 4 in 10s", Config{MRLeakGrowth: 4, MRLeakWindow: 10 * time.Second}, loop{cycles: 5, every: time.Second, leak: true}, 6 * time.Second, 6},
		{"5 with a growth of 4 in 10s, later", Config{MRLeakGrowth: 4, MRLeakWindow: 10 * time.Second}, loop{cycles: 5, every: time.Second, leak: true}, 16 * time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &clock{t: t0}
			cfg := tt.cfg
			cfg.Probes = true
			w := New(cfg, c.now)
			tt.loop.run(w, c)
			c.at(tt.now)
			rep := w.Evaluate(Query{Rules: []string{RuleMRLeak}})
			if n := w.CountFindings(0).Findings[CountKey{"rxe0", RuleMRLeak, SeverityError}]; n != len(rep.Findings) {
				t.Errorf("CountFindings counts %d mr-leak findings, Evaluate has %d", n, len(rep.Findings))
			}
			if tt.wantCount == 0 {
				if len(rep.Findings) != 0 {
					t.Errorf("findings %+v, want none", rep.Findings)
				}
				return
			}
			if len(rep.Findings) != 1 || rep.Findings[0].Count != tt.wantCount {
				t.Fatalf("findings %+v, want one of %d MRs", rep.Findings, tt.wantCount)
			}
		})
	}
}

// The finding names the device and the owner (its process; another
// process's MRs are not in it), the growth in MRs and bytes, the creates,
// the live QPs and the rate, the creation site, the oldest MRs with their
// keys, and what to do; error severity. The owner is the process, whatever
// thread registered its MRs.
func TestMRLeakEvidence(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	mrs := loop{cycles: 6, every: 10 * time.Second, leak: true}.run(w, c)
	// Another process with 20 MRs from the start and a thread of app
	// with one more: the dumps list them all.
	other := mrsOf(43, 500, 20)
	w.ScanMRs(mrDump(c.at(time.Minute), rxe, append(append(mrs, other...), mrsOf(44, 900, 1)...)...))
	c.at(2 * time.Minute)
	rep := w.Evaluate(Query{Rules: []string{RuleMRLeak}})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v, want one", rep.Findings)
	}
	f := rep.Findings[0]
	if f.Rule != RuleMRLeak || f.Severity != SeverityError || f.Device != "rxe0" || f.Comm != "app" || f.TGID != 42 || f.Count != 8 || f.AgeSeconds != 118.5 {
		t.Errorf("finding %+v: want an error on rxe0 for app (process 42), 8 MRs, over 118.5s (since the first dump)", f)
	}
	if f.Site != "app!connect_peer+0x4c" || f.SiteVia != "rdma_create_qp" {
		t.Errorf("site %q via %q, want the creates' site", f.Site, f.SiteVia)
	}
	want := []string{
		"MRs 2 → 8 (+6, +24 KiB) in 10m0s over 10 QP creates while its live QPs did not grow (2, then 2 at those dumps; 2 now): 0.6 MR and 2.4 KiB per create",
		"10 QPs created at app!connect_peer+0x4c via rdma_create_qp",
		"oldest: MR 1, 4 KiB, R_Key 0x1001, L_Key 0x2001 (listed since then)",
		"oldest: MR 10, 4 KiB, R_Key 0x100a, L_Key 0x200a (listed since then)",
		"oldest: MR 11, 4 KiB, R_Key 0x100b, L_Key 0x200b (listed since then)",
	}
	got := strings.Split(strings.TrimSuffix(evidenceText(f.Evidence), "\n"), "\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("evidence (-want +got):\n%s", diff)
	}
	if at := f.Evidence[3].Time; !at.Equal(t0.Add(time.Second + 500*time.Millisecond)) {
		t.Errorf("MR 10 listed since %v, want the dump after the first cycle", at)
	}
	for _, s := range []string{"ibv_dereg_mr", "ulimit -l", "24 KiB pinned"} {
		if !strings.Contains(f.Hint, s) {
			t.Errorf("hint %q does not say %q", f.Hint, s)
		}
	}

	// Without keys (no CAP_NET_ADMIN) the evidence says so.
	c2 := &clock{t: t0}
	w2 := New(Config{Probes: true}, c2.now)
	mrs = loop{cycles: 4, every: time.Second, leak: true}.run(w2, c2)
	for i := range mrs {
		mrs[i].RKey, mrs[i].LKey, mrs[i].HasKeys = 0, 0, false
	}
	w2.ScanMRs(mrDump(c2.at(time.Minute), rxe, mrs...))
	rep = w2.Evaluate(Query{Rules: []string{RuleMRLeak}})
	if len(rep.Findings) != 1 || !strings.Contains(evidenceText(rep.Findings[0].Evidence), "oldest: MR 1, 4 KiB, keys need CAP_NET_ADMIN") {
		t.Errorf("without keys: %+v", rep.Findings)
	}

	// Without the probes the rule is skipped with their reason; before
	// any MR dump, with that.
	w.SetProbes(false, "no BTF")
	rep = w.Evaluate(Query{Rules: []string{RuleMRLeak}})
	if len(rep.Findings) != 0 || fmt.Sprint(rep.SkippedRules) != "[{mr-leak needs the eBPF probes: no BTF}]" {
		t.Errorf("without probes: %+v, skipped %+v", rep.Findings, rep.SkippedRules)
	}
	w3 := New(Config{Probes: true}, c.now)
	w3.Scan(scan(c.now(), rxe))
	rep = w3.Evaluate(Query{Rules: []string{RuleMRLeak}})
	if fmt.Sprint(rep.SkippedRules) != "[{mr-leak no MR dump yet}]" {
		t.Errorf("before an MR dump: skipped %+v", rep.SkippedRules)
	}
}

// qpwork's reconnect loop as the lab runs it: each connection's QPs are
// destroyed before the dump that follows it, its MR kept, but the last
// dump comes while the last connection is up (2 live QPs, more than at
// any dump before). The leak is found at the dump before it, the evidence
// adding what the last one counted; the finding counts the MRs now. It
// goes when the MRs fall back to what they were.
func TestMRLeakLastDumpDuringConnection(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), rxe))
	mrs := mrsOf(42, 1, 1) // its buffer
	w.ScanMRs(mrDump(c.at(0), rxe, mrs...))
	const cycles = 6
	for i := range cycles {
		at := time.Second + time.Duration(i)*2*time.Second
		qpn := uint32(100 + 2*i)
		for q := qpn; q <= qpn+1; q++ {
			e := create(c.at(at), rxe, q, false)
			e.Site = Site{Call: "qpwork!connect+0x10", Via: "rdma_create_qp", File: "/usr/bin/qpwork"}
			w.Event(e)
		}
		mrs = append(mrs, mrsOf(42, uint32(10+i), 1)...)
		destroy := func() {
			for q := qpn; q <= qpn+1; q++ {
				w.Event(ev(c.at(at+200*time.Millisecond), EventQPDestroyed, rxe, q))
			}
		}
		if i == cycles-1 {
			w.ScanMRs(mrDump(c.at(at+100*time.Millisecond), rxe, mrs...))
			destroy()
			break
		}
		destroy()
		w.ScanMRs(mrDump(c.at(at+500*time.Millisecond), rxe, mrs...))
	}
	c.at(time.Minute)
	rep := w.Evaluate(Query{Rules: []string{RuleMRLeak}})
	if len(rep.Findings) != 1 || rep.Findings[0].Count != 7 || rep.Findings[0].TGID != 42 {
		t.Fatalf("findings %+v, want one for process 42 of 7 MRs", rep.Findings)
	}
	want := []string{
		"MRs 1 → 6 (+5, +20 KiB) in 10m0s over 10 QP creates while its live QPs did not grow (0, then 0 at those dumps; 0 now): 0.5 MR and 2 KiB per create",
		"at the last dump: 7 MRs (28 KiB), 2 live QPs",
		"10 QPs created at qpwork!connect+0x10 via rdma_create_qp", // between the two dumps
	}
	got := strings.Split(evidenceText(rep.Findings[0].Evidence), "\n")[:3]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("evidence (-want +got):\n%s", diff)
	}
	if n := w.CountFindings(0).Findings[CountKey{"rxe0", RuleMRLeak, SeverityError}]; n != 1 {
		t.Errorf("CountFindings counts %d mr-leak findings, want 1", n)
	}
	// Four of the connections' MRs deregistered: 3 left, fewer than the
	// growth's top and than 3 over its base.
	w.ScanMRs(mrDump(c.at(time.Minute), rxe, mrs[:3]...))
	if rep := w.Evaluate(Query{Rules: []string{RuleMRLeak}}); len(rep.Findings) != 0 {
		t.Errorf("findings %+v after the MRs fell back, want none", rep.Findings)
	}
}

// A kernel ULP's finding names the module, counts the QPs rdma_cm made
// for it (their stacks pass through it) and says nothing of ulimit.
func TestMRLeakKernel(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	loop{cycles: 4, every: 10 * time.Second, leak: true, kernel: true}.run(w, c)
	// rdma_cm QPs of another ULP do not count.
	for i := range uint32(5) {
		e := create(c.at(15*time.Second), rxe, 300+i, false) // between the dumps
		e.KernOwner, e.PID, e.TID = "rdma_cm", 0, 0
		e.Site = Site{Stack: []string{"rdma_create_qp+0x1f [rdma_cm]", "rds_ib_setup_qp+0x2c0 [rds_rdma]"}}
		w.Event(e)
	}
	c.at(2 * time.Minute)
	rep := w.Evaluate(Query{Rules: []string{RuleMRLeak}})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v, want one", rep.Findings)
	}
	f := rep.Findings[0]
	if f.KernName != "nvme_rdma" || f.Comm != "nvme_rdma" || f.PID != 0 || f.Count != 5 || len(f.Stack) == 0 {
		t.Errorf("finding %+v: want nvme_rdma's, 5 MRs, with the creates' stack", f)
	}
	if what := f.Evidence[0].What; !strings.Contains(what, "over 6 QP creates") {
		t.Errorf("evidence %q: want the 6 creates after the first dump (rds_rdma's not counted)", what)
	}
	if strings.Contains(f.Hint, "ulimit") || !strings.Contains(f.Hint, "ib_dereg_mr") {
		t.Errorf("hint %q: want ib_dereg_mr and no ulimit for a kernel module", f.Hint)
	}
}

// A kernel ULP that reconnects as nvme-rdma does (its QPs first, then an
// MR pool for each, all freed at the teardown) is no leak whenever the
// dumps come: in the middle of a setup, after it, between a teardown's
// destroys and its MRs' deregistration. The same ULP keeping its pools
// at each teardown is one from its first reconnect on.
func TestMRLeakPoolsPerConnection(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			t.Parallel()
			c := &clock{t: t0}
			w := New(Config{Probes: true}, c.now)
			w.Scan(scan(c.at(0), rxe))
			var held []rdmanl.MR
			pool := func(mrn uint32) []rdmanl.MR {
				out := mrsOf(0, mrn, 4)
				for i := range out {
					out[i].Owner = rdmanl.Owner{KernName: "nvme_rdma"}
				}
				return out
			}
			dump := func(at time.Duration, mrs []rdmanl.MR) []string {
				w.ScanMRs(mrDump(c.at(at), rxe, mrs...))
				var found []string
				for _, f := range w.Evaluate(Query{Rules: []string{RuleMRLeak}}).Findings {
					found = append(found, f.Evidence[0].What)
				}
				return found
			}
			var found []string
			for cycle := range 4 {
				t0 := time.Duration(cycle) * 20 * time.Second
				var conn []rdmanl.MR
				for q := range uint32(3) {
					e := create(c.at(t0), rxe, uint32(100+3*cycle)+q, false)
					e.KernOwner, e.PID, e.TID, e.Comm = "rdma_cm", 0, 0, ""
					e.Site = Site{Stack: []string{"rdma_create_qp+0x1f [rdma_cm]", "nvme_rdma_create_queue_ib+0x1f0 [nvme_rdma]"}}
					w.Event(e)
					conn = append(conn, pool(uint32(1000*cycle)+4*q)...)
				}
				found = append(found, dump(t0+time.Second, append(slices.Clone(held), conn[:4]...))...) // one pool so far
				found = append(found, dump(t0+2*time.Second, append(slices.Clone(held), conn...))...)
				for q := range uint32(3) {
					w.Event(ev(c.at(t0+10*time.Second), EventQPDestroyed, rxe, uint32(100+3*cycle)+q))
				}
				found = append(found, dump(t0+10*time.Second, append(slices.Clone(held), conn...))...) // the MRs not yet freed
				if keep {
					held = append(held, conn...)
				}
				found = append(found, dump(t0+11*time.Second, held)...)
			}
			if !keep && len(found) != 0 {
				t.Errorf("findings %q for a ULP whose MRs go with its connections", found)
			}
			if keep && (len(found) == 0 || !strings.HasPrefix(found[len(found)-1], "MRs 4 → 48 (+44, +176 KiB) in 10m0s over 9 QP creates")) {
				t.Errorf("findings %q, want the kept pools", found)
			}
		})
	}
}

// MRTally counts each device's last dump by owner: processes by their
// TGID whatever thread registered, kernel modules by name, the topN with
// the most MRs named and the rest together; an owner gone at the last
// dump is not counted.
func TestMRTally(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{}, c.now)
	if got := w.MRTally(10); len(got) != 0 {
		t.Errorf("before a dump: %+v", got)
	}
	kern := mrsOf(0, 700, 3)
	for i := range kern {
		kern[i].Owner, kern[i].Len = rdmanl.Owner{KernName: "rds_rdma"}, 1<<20
	}
	gone := mrsOf(45, 800, 2)
	var all []rdmanl.MR
	for _, group := range [][]rdmanl.MR{mrsOf(42, 1, 4), mrsOf(44, 10, 1), mrsOf(43, 20, 2), kern, gone} {
		all = append(all, group...)
	}
	w.ScanMRs(mrDump(c.at(0), rxe, all...))
	w.ScanMRs(mrDump(c.at(time.Second), rxe, all[:len(all)-2]...)) // 45 is gone
	w.ScanMRs(mrDump(c.at(time.Second), siw))
	got := w.MRTally(2)
	want := []DeviceMRs{
		{Index: 0, Name: "rxe0", At: t0.Add(time.Second), MRs: 10, Bytes: 7*4096 + 3<<20,
			Owners:   []OwnerMRs{{Owner: Owner{PID: 42, Comm: "app"}, MRs: 5, Bytes: 5 * 4096}, {Owner: Owner{Comm: "rds_rdma", ULP: "rds_rdma"}, MRs: 3, Bytes: 3 << 20}},
			OtherMRs: 2, OtherBytes: 2 * 4096},
		{Index: 1, Name: "siw0", At: t0.Add(time.Second)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MRTally (-want +got):\n%s", diff)
	}
}

// What a device keeps for mr-leak stays bounded: an owner's samples (a
// dump a second for an hour), its creates (thousands a minute), the
// owners of creates (a process a create) and the owners of MRs gone for
// longer than the window.
func TestMRStateBounded(t *testing.T) {
	t.Parallel()
	c := &clock{t: t0}
	w := New(Config{Probes: true}, c.now)
	w.Scan(scan(c.at(0), rxe))
	for s := range 3600 {
		at := c.at(time.Duration(s) * time.Second)
		w.ScanMRs(mrDump(at, rxe, mrsOf(42, 1, uint32(1+s%7))...))
		e := create(at, rxe, 7, false)
		e.PID = 1000 + uint32(s) // a process a second
		w.Event(e)
		w.Event(create(at, rxe, 8, false)) // process 42, a QP a second
	}
	st := w.devs[0].mrs
	if n := len(st.owners[mrOwnerKey{pid: 42}].samples); n > maxMRSamples {
		t.Errorf("%d samples kept, want at most %d", n, maxMRSamples)
	}
	if n := len(st.creates[mrOwnerKey{pid: 42}]); n != maxOwnerCreates {
		t.Errorf("%d creates kept, want %d", n, maxOwnerCreates)
	}
	if n := len(st.creates); n > int(DefaultMRLeakWindow/time.Second)+2 {
		t.Errorf("the creates of %d owners kept, want those of the window's", n)
	}
	// The window's growth is still seen across the samples' thinning.
	since := c.now().Add(-DefaultMRLeakWindow)
	in := st.owners[mrOwnerKey{pid: 42}].span(stampOf(since))
	if base, last := in[0], in[len(in)-1]; base.at.Time().After(since) || last.mrs != 1+3599%7 {
		t.Errorf("window from %v (%d MRs) to %d MRs, want from %v on", base.at.Time(), base.mrs, last.mrs, since)
	}
	// Gone for longer than the window: forgotten.
	w.ScanMRs(mrDump(c.at(time.Hour), rxe))
	w.ScanMRs(mrDump(c.at(time.Hour+DefaultMRLeakWindow), rxe))
	if len(st.owners) != 0 || len(st.creates) != 0 {
		t.Errorf("%d owners of MRs and %d of creates kept after the window", len(st.owners), len(st.creates))
	}
}
