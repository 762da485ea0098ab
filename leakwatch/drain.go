package leakwatch

import (
	"fmt"
	"math"
	"time"
)

// RuleSRQDrainStalled is the rule ID for a drain (ib_drain_qp) of an SRQ
// QP that waits, or waited, at least MinAge and at least a second. Stable
// API like the other rule IDs.
const RuleSRQDrainStalled = "srq-drain-stalled"

// slowDrain is the shortest drain srq-drain-stalled reports whatever
// MinAge; an SRQ QP whose drain took that long is kept for Config.Retain
// once destroyed, so that the rule can report it afterwards.
const slowDrain = time.Second

const specDrainSRQ = "IB spec 10.3.1 (LAST_WQE_REACHED); since Linux 6.11 ib_drain_qp waits up to 60 s for it on each SRQ QP (__ib_drain_srq)"

// drainState is what the probes saw of a QP's drains; a QP has one once a
// drain of it was seen (few QPs are drained while watched, so the others
// do not carry its 88 bytes).
type drainState struct {
	// DrainSince is when the outermost running drain began (zero: none
	// running); DrainFunc is its function.
	DrainSince time.Time
	DrainFunc  string
	drainDepth int
	// DrainTook is the longest drain that returned, DrainEnded when.
	// DrainBound says DrainTook is an upper bound: the drain's return was
	// not seen, and the QP's end (its destroy, or a scan that no longer
	// listed it) closed it.
	DrainTook  time.Duration
	DrainEnded time.Time
	DrainBound bool
}

// drainStarted records a drain's start. ib_drain_qp calls ib_drain_rq on a
// QP without an SRQ: nested drains count as the outermost.
func (h *History) drainStarted(ev Event) {
	e := h.record()
	if e.drain == nil {
		e.drain = &drainState{}
	}
	d := e.drain
	if d.drainDepth == 0 {
		d.DrainSince, d.DrainFunc = ev.Time, ev.Drain
		h.note(ev.Time, sourceProbe, "%s began", ev.Drain)
	}
	d.drainDepth++
}

// drainEnded records a drain's return; one whose start the probes missed
// counts with the duration the probe measured.
func (h *History) drainEnded(ev Event) {
	e := h.record()
	if e.drain == nil {
		e.drain = &drainState{}
	}
	ds := e.drain
	if ds.drainDepth > 1 {
		ds.drainDepth--
		return
	}
	d := ev.Duration
	if d == 0 && !ds.DrainSince.IsZero() {
		d = ev.Time.Sub(ds.DrainSince)
	}
	ds.drainDepth, ds.DrainSince, ds.DrainFunc = 0, time.Time{}, ""
	h.note(ev.Time, sourceProbe, "%s returned after %s", ev.Drain, d.Round(time.Millisecond))
	if d > ds.DrainTook || ds.DrainBound {
		// A return seen late replaces the bound its QP's end gave.
		ds.DrainTook, ds.DrainEnded, ds.DrainBound = d, ev.Time, false
	}
}

// drainClosed ends a drain whose return was not seen when its QP ends at
// t: a QP is destroyed after its drain returns, so the drain took at most
// until t. The kernel skips fexit programs for a call that was in
// progress while any program was attached to or detached from the same
// function (another rdmatool, a trace ending), so a long drain's return
// can go unseen.
func (h *History) drainClosed(t time.Time, src source) {
	ds := h.seen().drain // nil, or the history's own
	if ds == nil || ds.DrainSince.IsZero() {
		return
	}
	d := t.Sub(ds.DrainSince)
	h.note(t, src, "%s return not seen; the QP ended %s after it began", ds.DrainFunc, d.Round(time.Millisecond))
	ds.drainDepth, ds.DrainSince, ds.DrainFunc = 0, time.Time{}, ""
	if d > ds.DrainTook {
		ds.DrainTook, ds.DrainEnded, ds.DrainBound = d, t, true
	}
}

// srqDrainStalled: a drain of an SRQ QP has waited at least MinAge (and at
// least slowDrain) and not returned (its caller is blocked: critical), or
// returned after that long (the caller was blocked that long: error).
func srqDrainStalled(h *History, dev *deviceState, clk *ruleClock, cfg ruleConfig) (Finding, bool) {
	ds := h.seen().drain // nil, or the history's own
	if !h.OnSRQ || ds == nil {
		return Finding{}, false
	}
	threshold := max(cfg.MinAge, slowDrain)
	owner := h.Owner().name()
	explain := func() (why, fix string) {
		fix = fmt.Sprintf("run %s without an SRQ (use_srq=0 for nvmet_rdma and ib_srpt) or on a provider that delivers LAST_WQE_REACHED", owner)
		why = dev.name + " does not deliver it"
		if lw, _ := dev.lastWQEKnown(); lw == LastWQEDelivered {
			why = dev.name + " delivers it, yet not for this QP:"
		}
		return why, fix
	}
	if !ds.DrainSince.IsZero() && !h.Destroyed {
		wait, waited := clk.atLeast(ds.DrainSince, threshold)
		if !waited {
			return Finding{}, false
		}
		why, fix := explain()
		f := base(RuleSRQDrainStalled, SeverityCritical, h, wait)
		f.DrainSeconds, f.Draining = f.AgeSeconds, true
		f.Hint = fmt.Sprintf("%s of this SRQ QP of %s has waited %s for IB_EVENT_QP_LAST_WQE_REACHED (%s); the kernel waits up to 60 s per SRQ QP and the caller (a connection teardown, a port removal or a module unload) is blocked until then: %s",
			ds.DrainFunc, owner, wait.Round(100*time.Millisecond), why, fix)
		f.Spec = specDrainSRQ
		return f, true
	}
	if ds.DrainTook < threshold {
		return Finding{}, false
	}
	why, fix := explain()
	f := base(RuleSRQDrainStalled, SeverityError, h, clk.now.Sub(ds.DrainEnded))
	f.DrainSeconds = math.Round(ds.DrainTook.Seconds()*1000) / 1000
	took := ds.DrainTook.Round(100 * time.Millisecond).String()
	if ds.DrainBound {
		took = "up to " + took + " (its return was not seen; the QP ended then)"
	}
	if h.Destroyed {
		f.State = "destroyed"
	}
	f.Hint = fmt.Sprintf("the drain of this SRQ QP of %s took %s: the kernel waited for IB_EVENT_QP_LAST_WQE_REACHED (%s) and the caller (a connection teardown, a port removal or a module unload) was blocked that long: %s",
		owner, took, why, fix)
	f.Spec = specDrainSRQ
	return f, true
}
