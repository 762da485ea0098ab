package main

import (
	"fmt"
	"strings"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/opfile"
)

// sunPathMax is the longest path a unix socket can be bound to or
// connected at: sun_path (108 bytes) less the NUL
// (include/uapi/linux/un.h).
const sunPathMax = 107

// checkPath refuses, before anything opens it, a path flag's value the
// kernel would refuse (opfile.CheckPath). Flags whose "" means something
// do not call it.
func checkPath(flag, p string) error {
	if err := opfile.CheckPath(p); err != nil {
		return fmt.Errorf("%s %s: %w", flag, quote.String(p), err)
	}
	return nil
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
