package main

import (
	"fmt"
	"strings"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/opfile"
)

// checkPath refuses, before anything opens it, a path flag's value the
// kernel would refuse (opfile.CheckPath). Flags whose "" means something
// do not call it.
func checkPath(flag, p string) error {
	if err := opfile.CheckPath(p); err != nil {
		return fmt.Errorf("%s %s: %w", flag, quote.String(p), err)
	}
	return nil
}

// checkAbsPath is checkPath for a path the agent keeps (a daemon's working
// directory is no place to resolve one against), absolute as the
// configuration's key for it wants.
func checkAbsPath(flag, p string) error {
	if err := checkPath(flag, p); err != nil {
		return err
	}
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%s %s: want an absolute path", flag, quote.String(p))
	}
	if strings.HasSuffix(p, "/") {
		return fmt.Errorf("%s %s: want a file's path, not a directory's", flag, quote.String(p))
	}
	return nil
}

// checkSocketPath is checkPath for a unix socket, whose path
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
	if err := agentapi.CheckSocketPath(p); err != nil {
		return fmt.Errorf("%s %s: %w", flag, quote.String(p), err)
	}
	return nil
}
