package main

import (
	"strings"
	"testing"
)

// Fuzz targets for what users type: filters, numbers, links. Input must
// give a value or an error, never a panic, and what parses must hold up.

func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"lqpn 0-6", "state ERR type RC", "pid 10,20-30", "link rxe0/1 lqpn 17", "comm app srqn 0", "lqpn", "x y", "sq-psn 1", "lqpn 4294967295-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		flt, extras, err := parseFilter(qpRow{}, args, "link", "dev")
		if err != nil {
			return
		}
		flt.match(qpRow{LQPN: 17, State: "ERR", Type: "RC", Comm: "app"})
		if sel := extras["link"]; sel != "" {
			parseLink(sel)
		}
		if _, err := parseRes("qp", args); err != nil && !strings.Contains(line, "link") && !strings.Contains(line, "dev") {
			t.Errorf("parseFilter took %q, parseRes refused it: %v", line, err)
		}
	})
}

func FuzzParseNumber(f *testing.F) {
	for _, s := range []string{"17", "0x11", "017", "0", "18446744073709551615", "-1", "1e3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parseNumber(s)
	})
}

func FuzzParseLink(f *testing.F) {
	for _, s := range []string{"rxe0", "rxe0/1", "rxe0/-", "/1", "rxe0/0", "rxe0/4294967296", "a/b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dev, port, err := parseLink(s)
		if err == nil && (dev == "" || strings.Contains(s, "/") && port == 0 && !strings.HasSuffix(s, "/") && !strings.HasSuffix(s, "/-")) {
			t.Errorf("parseLink(%q) = %q, %d", s, dev, port)
		}
	})
}
