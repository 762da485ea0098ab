package main

import (
	"log/slog"
	"strconv"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/internal/jsonw"
	"github.com/rdmatool/rdmatool/symbolize"
)

// userSiteJSON are the fields a qp_create line of `trace -j` adds for a
// user QP whose creating call a uprobe saw. Their json tags are the schema.
type userSiteJSON struct {
	Site        string `json:"site"`          // symbolize.Site.String: "qpwork!create_qps_verbs+0x4c"
	SiteFile    string `json:"site_file"`     // the file as the process maps it
	SiteBuildID string `json:"site_build_id"` // its GNU build ID, "" when it has none
	SiteOffset  uint64 `json:"site_offset"`   // the call instruction's offset in the file
	SiteVia     string `json:"site_via"`      // the library function called: bpf.Event.Via
}

// kernelSiteJSON is the field a qp_create line of `trace -j` adds for a
// kernel QP whose stack was captured.
type kernelSiteJSON struct {
	// Stack holds the kernel functions that led to the create, innermost
	// first: "create_mad_qp+0x5d [ib_core]", or a frame's address in hex
	// where kallsyms names none.
	Stack []string `json:"stack"`
}

// eventSite is where a QP was created, symbolized.
type eventSite struct {
	user  *userSiteJSON
	stack []string
}

// has reports whether the event had a site to show.
func (s eventSite) has() bool { return s.user != nil || s.stack != nil }

// short is the site in one word for text output: the user call site, or
// the innermost kernel frame.
func (s eventSite) short() string {
	switch {
	case s.user != nil:
		return s.user.Site
	case len(s.stack) > 0:
		return s.stack[0]
	}
	return ""
}

// appendJSON appends the site's fields to a JSON object b ends with: b
// loses its closing brace and gets it back after them. The bytes are those
// encoding/json writes for userSiteJSON or kernelSiteJSON.
func (s eventSite) appendJSON(b []byte) []byte {
	if !s.has() || len(b) == 0 || b[len(b)-1] != '}' {
		return b
	}
	b = b[:len(b)-1]
	if u := s.user; u != nil {
		b = jsonw.AppendString(append(b, `,"site":`...), u.Site)
		b = jsonw.AppendString(append(b, `,"site_file":`...), u.SiteFile)
		b = jsonw.AppendString(append(b, `,"site_build_id":`...), u.SiteBuildID)
		b = jsonw.AppendUint(append(b, `,"site_offset":`...), u.SiteOffset)
		b = jsonw.AppendString(append(b, `,"site_via":`...), u.SiteVia)
	} else {
		b = append(b, `,"stack":[`...)
		for i, f := range s.stack {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonw.AppendString(b, f)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// creationSites symbolizes the creation sites of trace events at event
// time, while the creating process still runs: a user QP's call site
// through /proc/PID (symbolize.User), a kernel QP's stack through
// kallsyms, read when the first kernel QP comes. Both cache what they read.
type creationSites struct {
	log         *slog.Logger
	user        *symbolize.User
	procRoot    string
	kernel      *symbolize.Kernel
	kernelTried bool
}

func newCreationSites(log *slog.Logger, procRoot string) *creationSites {
	return &creationSites{log: log, user: symbolize.NewUser(procRoot), procRoot: procRoot}
}

// site returns where ev's QP was created; nothing for other events or
// when the probes did not see it. A process that is gone, or a file that
// cannot be read, leaves what could be found ("?" at worst).
func (c *creationSites) site(ev *bpf.Event) eventSite {
	switch {
	case ev.Kind != bpf.KindQPCreate:
		return eventSite{}
	case ev.Via != "":
		s, err := c.user.CallSite(ev.PID, ev.ViaReturn)
		if err != nil {
			c.log.Debug("creation site not symbolized", "pid", ev.PID, "err", err)
		}
		return eventSite{user: &userSiteJSON{Site: s.String(), SiteFile: s.Path, SiteBuildID: s.BuildID, SiteOffset: s.Offset,
			SiteVia: ev.Via}}
	case ev.Stack != nil:
		return eventSite{stack: c.frames(ev.Stack, ev.Probe)}
	}
	return eventSite{}
}

// frames names a kernel stack's return addresses, leaving out the probe's
// own: the frames of BPF programs and trampolines, and a first frame in
// the probed function (where an fentry trampoline was called from).
func (c *creationSites) frames(stack []uint64, probed string) []string {
	if !c.kernelTried {
		c.kernelTried = true
		var err error
		if c.kernel, err = symbolize.NewKernel(c.procRoot); err != nil {
			c.log.Warn("kernel stacks shown as addresses", "err", err)
		}
	}
	out := []string{}
	for _, ret := range stack {
		if c.kernel == nil {
			out = append(out, "0x"+strconv.FormatUint(ret, 16))
			continue
		}
		s, err := c.kernel.Frame(ret)
		switch {
		case err != nil:
			out = append(out, "0x"+strconv.FormatUint(ret, 16))
		case s.Module == "bpf", len(out) == 0 && s.Symbol == probed:
		default:
			out = append(out, s.String())
		}
	}
	return out
}
