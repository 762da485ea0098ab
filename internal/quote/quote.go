package quote

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Max is how many bytes of a value String keeps.
const Max = 64

// String is s quoted for an error message, as strconv.Quote quotes it. A
// value longer than Max bytes is cut at the last rune boundary within Max
// and followed by its length: "aaaa…" (1048576 bytes), without the
// ellipsis.
func String(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:cut(s, Max)]) + " (" + strconv.Itoa(len(s)) + " bytes)"
}

// cut is where s, longer than limit bytes, is cut: at the last rune
// boundary within limit, or at limit when no rune starts there (invalid
// UTF-8).
func cut(s string, limit int) int {
	n := limit
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	if n == 0 {
		return limit
	}
	return n
}

// MaxLine is how many bytes of a message Line keeps.
const MaxLine = 512

// Line is a message from elsewhere (an agent's error, an HTTP reason
// phrase) for one line of an error: Text(s), and only its first MaxLine
// bytes, cut at a rune boundary and followed by "… (N bytes)" where it
// was cut.
func Line(s string) string {
	if len(s) > MaxLine {
		return Text(s[:cut(s, MaxLine)]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
	}
	return Text(s)
}

// Text is s with what a terminal would act on escaped (see the package
// comment); s itself when there is nothing to escape.
func Text(s string) string {
	if printable(s) {
		return s
	}
	return string(escape(make([]byte, 0, len(s)+8), s))
}

// AppendText appends Text(s) to b.
func AppendText(b []byte, s string) []byte {
	if printable(s) {
		return append(b, s...)
	}
	return escape(b, s)
}

// printable reports whether s has nothing Text escapes.
func printable(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			return false
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !unicode.IsPrint(r) {
			return false
		}
		i += n
	}
	return true
}

const hex = "0123456789abcdef"

// escape appends s to b with every non-printable rune and invalid byte
// escaped.
func escape(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			b = append(b, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
		case c >= utf8.RuneSelf && unicode.IsPrint(r):
			b = append(b, s[i:i+n]...)
		default:
			// strconv writes the rune quoted, '\x1b': keep what is
			// between the quotes.
			start := len(b)
			b = strconv.AppendQuoteRune(b, r)
			copy(b[start:], b[start+1:len(b)-1])
			b = b[:len(b)-2]
		}
		i += n
	}
	return b
}

// MaxLabel is how many bytes of a value Label keeps.
const MaxLabel = 128

// Label is s as a Prometheus label value or any other string the agent
// serves: valid UTF-8, each invalid byte replaced by U+FFFD as
// encoding/json replaces it, and at most MaxLabel bytes of it, cut at a
// rune boundary and followed by "…" where it was cut (so at most
// MaxLabel+3 bytes in all). A valid value of MaxLabel bytes or fewer comes
// back as it is, without allocating: the agent passes every label through
// Label on each scrape.
func Label(s string) string {
	if len(s) <= MaxLabel && utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, min(len(s), MaxLabel)+len("…"))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:]) // an invalid byte: RuneError, n 1
		if len(b)+utf8.RuneLen(r) > MaxLabel {
			return string(append(b, "…"...))
		}
		b = utf8.AppendRune(b, r)
		i += n
	}
	return string(b)
}
