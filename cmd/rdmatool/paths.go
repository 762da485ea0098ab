package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/internal/quote"
)

// What the kernel takes as a path (include/uapi/linux/limits.h); a unix
// socket's is agentapi.CheckSocketPath's.
const (
	pathMax = 4095 // PATH_MAX less the NUL
	nameMax = 255  // NAME_MAX: one component of a path
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

// checkSocketPath is checkPath for a unix socket, which
// agentapi.CheckSocketPath checks too (its length), as it checks the
// agent's configuration's socket key; absolute says whether a relative
// path is refused, as that key refuses one.
func checkSocketPath(flag, p string, absolute bool) error {
	if err := checkPath(flag, p); err != nil {
		return err
	}
	if absolute && !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%s %s: want an absolute path", flag, quote.String(p))
	}
	var se *agentapi.SocketPathError
	if err := agentapi.CheckSocketPath(p); errors.As(err, &se) {
		return fmt.Errorf("%s %s: %w", flag, quote.String(p), se.Err)
	}
	return nil
}
