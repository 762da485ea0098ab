// Package docs is rdmatool's manual: the Markdown files beside this one,
// embedded in the binary. The commands whose behaviour a page describes
// take their help, and so their man page (rdmatool docs man), from it:
// agent.md is `rdmatool agent`'s, rules.md `rdmatool qp-leaks`'s,
// reset.md `rdmatool reset`'s and naming.md `rdmatool rename`'s. lab.md
// and benchmarks.md are read in the repository only and are not embedded.
//
// The package holds text and nothing else: no I/O, no privileges, and it
// imports only the standard library.
package docs
