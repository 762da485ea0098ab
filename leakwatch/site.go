package leakwatch

import (
	"strings"
	"unique"
)

// Site is where a QP was created, as whoever watched the kernel named it
// when the create happened (package watch, through package symbolize,
// while the creating process still ran): for a user QP the application's
// call of the verbs library, for a kernel QP the kernel stack. The zero
// Site is none: the probes did not see the create, or saw no site.
type Site struct {
	// Call is the user call site, "qpwork!create_qps_verbs+0x4c": the
	// file's base name, then the function and the offset in it of the
	// call instruction ("file+0xOFFSET" in a file without symbols, "?"
	// when the process was gone before it could be named).
	Call string
	// Via is the library function the application called
	// ("rdma_create_qp"); File the file holding the call as the process
	// mapped it, BuildID its GNU build ID ("" when it has none), Offset
	// the call instruction's offset in the file.
	Via     string
	File    string
	BuildID string
	Offset  uint64
	// Stack is a kernel QP's stack, innermost first: functions with their
	// module ("create_mad_qp+0x5d [ib_core]"), or a frame's address in
	// hex where kallsyms names none. For a user QP it is the calls above
	// Call, its caller's first ("app!main+0x1c"), where the program has
	// frame pointers (nil where none could be followed).
	Stack []string
}

// IsZero says whether the site is none.
func (s Site) IsZero() bool { return s.Call == "" && s.Via == "" && len(s.Stack) == 0 }

// String is the site in one phrase: "app!connect_peer+0x4c via
// rdma_create_qp" for a user QP, its innermost kernel frame for a kernel
// QP, "" for none.
func (s Site) String() string {
	switch {
	case s.Via != "":
		return s.Call + " via " + s.Via
	case s.Call != "":
		return s.Call
	case len(s.Stack) > 0:
		return s.Stack[0]
	}
	return ""
}

// siteKey is a Site as histories keep it: comparable, so that the QPs made
// at one site share one interned copy (unique.Make). The stack's frames
// are joined by newlines, which no frame holds.
type siteKey struct {
	call, via, file, buildID string
	offset                   uint64
	stack                    string
}

// siteHandle is an interned site; the zero handle is none.
type siteHandle = unique.Handle[siteKey]

// intern returns s's handle, the zero handle for none.
func (s Site) intern() siteHandle {
	if s.IsZero() {
		return siteHandle{}
	}
	return unique.Make(siteKey{call: s.Call, via: s.Via, file: s.File, buildID: s.BuildID, offset: s.Offset,
		stack: strings.Join(s.Stack, "\n")})
}

// siteOf is the site a handle holds (none for the zero handle).
func siteOf(h siteHandle) Site {
	if h == (siteHandle{}) {
		return Site{}
	}
	k := h.Value()
	s := Site{Call: k.call, Via: k.via, File: k.file, BuildID: k.buildID, Offset: k.offset}
	if k.stack != "" {
		s.Stack = strings.Split(k.stack, "\n")
	}
	return s
}
