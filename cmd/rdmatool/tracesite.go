package main

import (
	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/internal/jsonw"
	"github.com/rdmatool/rdmatool/watch"
)

// userSiteJSON are the fields a qp_create line of `trace -j` adds for a
// user QP whose creating call a uprobe saw. Their json tags are the schema.
type userSiteJSON struct {
	Site        string `json:"site"`          // symbolize.Site.String: "qpwork!create_qps_verbs+0x4c"
	SiteFile    string `json:"site_file"`     // the file as the process maps it
	SiteBuildID string `json:"site_build_id"` // its GNU build ID, "" when it has none
	SiteOffset  uint64 `json:"site_offset"`   // the call instruction's offset in the file
	SiteVia     string `json:"site_via"`      // the library function called: bpf.Event.Via
	// Stack is the calls above the site, its caller's first, where the
	// program has frame pointers (watch.Sites); absent when none.
	Stack []string `json:"stack,omitempty"`
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
		if len(u.Stack) > 0 {
			b = appendStack(b, u.Stack)
		}
	} else {
		b = appendStack(b, s.stack)
	}
	return append(b, '}')
}

// appendStack appends a "stack" field of frames.
func appendStack(b []byte, frames []string) []byte {
	b = append(b, `,"stack":[`...)
	for i, f := range frames {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonw.AppendString(b, f)
	}
	return append(b, ']')
}

// eventSiteOf returns the site of ev that sites names (watch.Sites), as
// trace shows it.
func eventSiteOf(sites *watch.Sites, ev *bpf.Event) eventSite {
	s := sites.Site(ev)
	switch {
	case s.Via != "":
		return eventSite{user: &userSiteJSON{Site: s.Call, SiteFile: s.File, SiteBuildID: s.BuildID, SiteOffset: s.Offset, SiteVia: s.Via,
			Stack: s.Stack}}
	case s.Stack != nil:
		return eventSite{stack: s.Stack}
	}
	return eventSite{}
}
