// Package docs is rdmatool's manual: the Markdown pages in this directory.
// The commands whose behaviour a page describes take their help, and so
// their man page (rdmatool docs man), from it, embedded in the binary:
// agent.md is `rdmatool agent`'s, rules.md `rdmatool qp-leaks`'s, reset.md
// `rdmatool reset`'s and naming.md `rdmatool rename`'s (Page). lab.md,
// benchmarks.md and runbook.md (the alerts' runbook, which their
// runbook_url annotations point at) are read in the repository only and
// are not embedded.
//
// The package holds text and nothing else: it makes no system call, needs
// no privilege, and imports only the standard library.
package docs
