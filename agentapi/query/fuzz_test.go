package query

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzParseQuery reads any query string a client could send: a malformed
// one is the handler's 400 before Parse; otherwise Parse gives a Query
// that holds what was asked, or one line saying what is wrong.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"", "dev=rxe0&min_age=5s&rule=stale-error-qp&max_qp=rxe0=10&no_probes=1&limit=3",
		"min_age=-1s", "dev=%zz", "rule=x&rule=y", "limit=2147483648", "dev=a&dev=b", "no_probes=true", "max_qp=rxe0=0",
		"x=1", "min_age=1h2m3.5s", "max_qp=a%3Db"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := Parse(v)
		if err != nil {
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "agent: ") {
				t.Errorf("Parse(%q): error %q, want one line starting with \"agent: \"", raw, msg)
			}
			return
		}
		if q.MinAge < 0 || q.Limit < 0 || q.Device != v.Get("dev") || !slices.Equal(q.Rules, v["rule"]) {
			t.Errorf("Parse(%q) = %+v", raw, q)
		}
		if (v.Get("no_probes") == "1" || v.Get("no_probes") == "true") != (q.SkipProbeRules != "") {
			t.Errorf("Parse(%q): no_probes %q gave SkipProbeRules %q", raw, v.Get("no_probes"), q.SkipProbeRules)
		}
	})
}
