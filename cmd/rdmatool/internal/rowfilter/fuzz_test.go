package rowfilter

import (
	"strconv"
	"strings"
	"testing"
)

// Fuzz targets for what users type: filters, numbers, links. Input must
// give a value or a one-line error, never a panic, and what parses must
// hold up. The command's tests check Parse against the real row types.

// fuzzRow has a field of every kind the listings' rows have.
type fuzzRow struct {
	LQPN   uint32 `json:"lqpn"`
	SQPSN  uint32 `json:"sq_psn"`
	Bytes  uint64 `json:"bytes"`
	Count  int    `json:"count"`
	State  string `json:"state"`
	SRQ    bool   `json:"srq"`
	Hidden string `json:"-"`
	Text   string `json:"text" filter:"-"`
}

func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"lqpn 0-6", "state ERR srq true", "count 10,20-30", "link rxe0/1 lqpn 17", "bytes 0x10 sq-psn 1",
		"lqpn", "x y", "text a", "lqpn 4294967295-0", "lqpn 1,,2", "dev a/b/c", "lqpn 0x-1", "state FOO", "state unknown(9)", "srq yes",
		"dev a dev b", "dev a link b/1"} {
		f.Add(s)
	}
	row := fuzzRow{LQPN: 17, SQPSN: 3, Bytes: 1 << 40, Count: 2, State: "ERR", SRQ: true}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		flt, extras, err := Parse(Spec{Row: fuzzRow{}, Enums: map[string]func() []string{"state": func() []string { return []string{"ERR", "RTS"} }},
			Selectors: []string{"link", "dev"}}, args)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Parse(%q): error %q is not one line", line, err)
			}
			return
		}
		flt.Match(row)
		if len(extras) > 1 {
			t.Errorf("Parse(%q): selectors %v, want one at most", line, extras)
		}
		for name, sel := range extras {
			if name != "link" && name != "dev" {
				t.Errorf("Parse(%q): extra %q was not asked for", line, name)
			}
			ParseLink(sel)
		}
		// A row holding the number a single lqpn filter names passes it.
		if len(args) == 2 && strings.ReplaceAll(args[0], "-", "_") == "lqpn" {
			if n, err := parseNumber(args[1]); err == nil && n <= 1<<32-1 && !flt.Match(fuzzRow{LQPN: uint32(n)}) {
				t.Errorf("Parse(%q) does not match lqpn %d", line, n)
			}
		}
	})
}

func FuzzParseNumber(f *testing.F) {
	for _, s := range []string{"17", "0x11", "017", "0", "18446744073709551615", "-1", "1e3", "", "0X1f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseNumber(s)
		if err != nil {
			return
		}
		if back, err := parseNumber(strconv.FormatUint(n, 10)); err != nil || back != n {
			t.Errorf("parseNumber(%q) = %d, which reads back as %d, %v", s, n, back, err)
		}
	})
}

func FuzzParseLink(f *testing.F) {
	for _, s := range []string{"rxe0", "rxe0/1", "rxe0/-", "/1", "rxe0/0", "rxe0/4294967296", "a/b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dev, port, err := ParseLink(s)
		if err == nil && (dev == "" || strings.Contains(s, "/") && port == 0 && !strings.HasSuffix(s, "/") && !strings.HasSuffix(s, "/-")) {
			t.Errorf("ParseLink(%q) = %q, %d", s, dev, port)
		}
	})
}
