package quote

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 1<<20)
	tests := []struct {
		name, in, want string
	}{
		{"short", "rxe0", `"rxe0"`},
		{"empty", "", `""`},
		{"control characters", "a\x1b[31m\r\nb", `"a\x1b[31m\r\nb"`},
		{"exactly Max", strings.Repeat("b", Max), strconv.Quote(strings.Repeat("b", Max))},
		{"1 MiB", long, `"` + strings.Repeat("a", Max) + `" (1048576 bytes)`},
		{"cut at a rune boundary", strings.Repeat("a", Max-1) + "é" + "zz", `"` + strings.Repeat("a", Max-1) + `" (67 bytes)`},
		{"invalid UTF-8 cut where it is", strings.Repeat("\x80", Max+1), strconv.Quote(strings.Repeat("\x80", Max)) + " (65 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := String(tt.in); got != tt.want {
				t.Errorf("String(%.80q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"plain", "qpwork", "qpwork"},
		{"printable UTF-8", "café ↔ 日本", "café ↔ 日本"},
		{"quotes and backslashes stay", `a"b\c'`, `a"b\c'`},
		{"ESC", "\x1b]0;owned\x07x", `\x1b]0;owned\ax`},
		{"CR and LF", "evil\rfine\nsecond line", `evil\rfine\nsecond line`},
		{"tab and DEL", "a\tb\x7f", `a\tb\x7f`},
		{"C1 CSI", "a\u009b31mb", `a\u009b31mb`},
		{"right-to-left override", "abc\u202edef", `abc\u202edef`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
		{"NUL", "a\x00b", `a\x00b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Text(tt.in); got != tt.want {
				t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if got := string(AppendText([]byte("x"), tt.in)); got != "x"+tt.want {
				t.Errorf("AppendText(x, %q) = %q, want %q", tt.in, got, "x"+tt.want)
			}
		})
	}
}

func TestTextDoesNotAllocate(t *testing.T) {
	s := "comm qpwork cgroup /system.slice/qpwork.service"
	b := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() {
		_ = Text(s)
		b = AppendText(b[:0], s)
	}); n != 0 {
		t.Errorf("Text and AppendText of a printable string: %v allocations, want 0", n)
	}
}

// FuzzText: what Text returns is printable, one line, and reads back as
// s when it is unquoted as the Go string literal it is the inside of
// (quotes and backslashes aside, which Text leaves).
func FuzzText(f *testing.F) {
	for _, s := range []string{"", "rxe0", "a\x1b[2Jb", "\r\n", "\u202e", "\xff\xfe", "é", strings.Repeat("x", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Text(s)
		if !printable(got) || strings.ContainsAny(got, "\r\n") {
			t.Errorf("Text(%q) = %q: not printable", s, got)
		}
		if !strings.ContainsAny(s, `"\`) {
			back, err := strconv.Unquote(`"` + got + `"`)
			if err != nil || back != s && utf8.ValidString(s) {
				t.Errorf("Text(%q) = %q, which unquotes to %q, %v", s, got, back, err)
			}
		}
		q := String(s)
		if len(q) > 4*Max+len(` (2147483647 bytes)`)+2 || strings.ContainsAny(q, "\r\n") {
			t.Errorf("String(%.100q) = %q: too long or not one line", s, q)
		}
	})
}

func TestLabel(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	tests := []struct {
		name, in, want string
	}{
		{"plain", "qpwork", "qpwork"},
		{"empty", "", ""},
		{"invalid bytes, each replaced", "qp\xff\xfework", "qp\ufffd\ufffdwork"},
		{"a cut rune", "ab\xc3", "ab\ufffd"},
		{"cut at a rune boundary", long, strings.Repeat("é", 64) + "…"},
		{"exactly MaxLabel", strings.Repeat("a", MaxLabel), strings.Repeat("a", MaxLabel)},
		{"one over", strings.Repeat("a", MaxLabel+1), strings.Repeat("a", MaxLabel) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Label(tt.in)
			if got != tt.want {
				t.Errorf("Label(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !utf8.ValidString(got) || len(got) > MaxLabel+len("…") {
				t.Errorf("Label(%q) = %q: invalid UTF-8 or %d bytes", tt.in, got, len(got))
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { _ = Label("qpwork") }); n != 0 {
		t.Errorf("Label of a valid short value allocates %v times", n)
	}
}

func FuzzLabel(f *testing.F) {
	f.Add("qp\xff\xfework")
	f.Add(strings.Repeat("\xe2\x82", 90))
	f.Fuzz(func(t *testing.T, s string) {
		got := Label(s)
		if !utf8.ValidString(got) || len(got) > MaxLabel+len("…") {
			t.Fatalf("Label(%q) = %q: invalid UTF-8 or %d bytes", s, got, len(got))
		}
		if utf8.ValidString(s) && len(s) <= MaxLabel && got != s {
			t.Fatalf("Label(%q) = %q, want it unchanged", s, got)
		}
	})
}

func TestLine(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"device rxe9 is gone", "device rxe9 is gone"},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{strings.Repeat("é", 300), strings.Repeat("é", 256) + "… (600 bytes)"}, // 512 bytes of 2-byte runes
		{"a" + strings.Repeat("é", 300), "a" + strings.Repeat("é", 255) + "… (601 bytes)"},
		{strings.Repeat("x", 1<<20), strings.Repeat("x", MaxLine) + "… (1048576 bytes)"},
	} {
		if got := Line(tt.in); got != tt.want {
			t.Errorf("Line(%.40q) = %.80q, want %.80q", tt.in, got, tt.want)
		}
	}
}
