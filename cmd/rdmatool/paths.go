package main

import (
	"fmt"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
)

// What the kernel takes as a path (include/uapi/linux/limits.h, un.h).
const (
	pathMax = 4095 // PATH_MAX less the NUL
	nameMax = 255  // NAME_MAX: one component of a path
	// sunPathMax is the longest path a unix socket can be bound to or
	// connected at: sun_path (108 bytes) less the NUL.
	sunPathMax = 107
)

// checkPath refuses, before anything opens it, a path flag's value the
// kernel would refuse: an empty one (flags whose "" means something do
// not call it), one with a NUL byte, longer than PATH_MAX, or with a
// component longer than NAME_MAX.
func checkPath(flag, p string) error {
	why := ""
	switch {
	case p == "":
		why = "want a path"
	case strings.IndexByte(p, 0) >= 0:
		why = "a path has no NUL byte"
	case len(p) > pathMax:
		why = fmt.Sprintf("longer than a path can be (%d bytes)", pathMax)
	default:
		for c := range strings.SplitSeq(p, "/") {
			if len(c) > nameMax {
				why = fmt.Sprintf("a name in it is longer than a file name can be (%d bytes)", nameMax)
				break
			}
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%s %s: %s", flag, quote.String(p), why)
}

// checkSocketPath is checkPath for a unix socket, which holds at most
// sunPathMax bytes; absolute says whether a relative path is refused, as
// the agent's configuration refuses one.
func checkSocketPath(flag, p string, absolute bool) error {
	if err := checkPath(flag, p); err != nil {
		return err
	}
	switch {
	case absolute && !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%s %s: want an absolute path", flag, quote.String(p))
	case len(p) > sunPathMax:
		return fmt.Errorf("%s %s: a unix socket's path holds at most %d bytes", flag, quote.String(p), sunPathMax)
	}
	return nil
}
