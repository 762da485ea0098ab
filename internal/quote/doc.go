// Package quote puts text that rdmatool did not write itself (what a user
// typed, a line of an operator's file, a name a process or the kernel gave)
// into errors and text output meant for a terminal or a log line.
//
// String quotes a value for an error, as strconv.Quote does, and cuts it
// at Max bytes, so that a 1 MB name gives a short line that says how long
// the name was. Text (and AppendText) escape what a terminal or a
// line-oriented reader would act on: control characters (ESC, CR, LF and
// the rest of C0, DEL, C1), the other runes Unicode does not call printable
// (format characters such as U+202E among them) and invalid UTF-8, written
// as Go writes them in a quoted string (\x1b, \r, \n, \u202e, \xff); the
// rest, quotes and backslashes included, is left as it is. A string with
// nothing to escape comes back as it is, without allocating, so text
// output can pass every name through Text. Line is Text cut at MaxLine
// bytes with the length said: for a message from elsewhere (an agent's
// error, an HTTP reason, a DEVPATH) and qp-leaks' text, whose strings
// come from an agent.
//
// Label makes a value fit to serve as a Prometheus label (the agent's
// metrics take every process name, file name and symbol through it):
// valid UTF-8, each invalid byte replaced by U+FFFD as encoding/json does,
// cut at MaxLabel bytes.
//
// JSON output needs none of this: encoding/json and internal/jsonw escape
// control characters already.
//
// It needs no privileges, makes no system call and imports the standard
// library only.
package quote
