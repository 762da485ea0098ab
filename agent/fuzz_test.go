package agent

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// FuzzHandler asks the agent's API anything a client could send as path,
// query and method: the answer is one JSON object and a status the API
// documents, never a panic.
func FuzzHandler(f *testing.F) {
	for _, s := range []struct{ method, target string }{
		{"GET", "/v1/qp-leaks"}, {"GET", "/v1/qp-leaks?dev=rxe0&min_age=5s&rule=stale-error-qp&max_qp=rxe0=10&no_probes=1"},
		{"GET", "/v1/status"}, {"POST", "/v1/status"}, {"GET", "/v1/qp-leaks?min_age=-1s"}, {"GET", "//v1/status"},
		{"GET", "/v1/qp-leaks?dev=%zz"}, {"HEAD", "/v1/qp-leaks?rule=x&rule=y"},
	} {
		f.Add(s.method, s.target)
	}
	st := NewState(leakwatch.Config{}, func() time.Time { return t0 }, "fuzz")
	st.Scan(leakwatch.Scan{Time: t0, Devices: []leakwatch.DeviceScan{{Device: rxe, QPs: []rdmanl.QP{qp(17, rdmanl.QPStateErr, 42)}}}})
	h := NewHandler(st)
	f.Fuzz(func(t *testing.T, method, target string) {
		req, err := http.NewRequest(method, "http://agent", nil)
		if err != nil {
			return
		}
		req.URL.Opaque = "" // the target as sent, uncleaned
		req.URL.Path, req.URL.RawQuery, _ = bytesCut(target, '?')
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 404, 405:
		default:
			t.Fatalf("%s %q: status %d", method, target, rec.Code)
		}
		if method == http.MethodHead {
			return
		}
		body := rec.Body.Bytes()
		if !json.Valid(body) || bytes.Count(body, []byte("\n")) != 1 || (rec.Code != 200 && len(body) > 1024) {
			t.Fatalf("%s %q: %d body %q", method, target, rec.Code, body)
		}
	})
}

func bytesCut(s string, sep byte) (before, after string, found bool) {
	if i := bytes.IndexByte([]byte(s), sep); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}
