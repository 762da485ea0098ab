package agentapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"unicode/utf8"

	"github.com/rdmatool/rdmatool/agentapi/query"
	"github.com/rdmatool/rdmatool/leakwatch"
)

// quote is s for an error message, cut as query.Quote cuts it.
func quote(s string) string { return query.Quote(s) }

// Source is what Handler answers from: the agent's history (a
// watch.State). Its methods are called concurrently, once per request.
type Source interface {
	// Status is the history's status; Handler adds the version.
	Status() Status
	// HasDevice reports whether the history has the device named dev
	// (any device when dev is "").
	HasDevice(dev string) bool
	// Report evaluates the history for q; ok is false when q names a
	// device the history does not have (any more). Handler sets Source.
	Report(q leakwatch.Query) (rep CheckReport, ok bool)
}

// Handler answers the API's requests from src, as the agent of version
// version: GET /v1/qp-leaks and GET /v1/status (and HEAD), errors as
// {"error":"..."} with the status the API documents. Asked about a device
// it does not have while it has none and its status has an error (the
// device listing's: the agent cannot read RDMA netlink), it answers that
// error, not that the device is missing.
func Handler(src Source, version string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		endpoint := r.URL.Path
		if endpoint != "/v1/qp-leaks" && endpoint != "/v1/status" {
			writeError(w, http.StatusNotFound, fmt.Errorf("agent: no such endpoint %s %s (try GET /v1/qp-leaks or GET /v1/status)", quote(r.Method), quote(endpoint)))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("agent: %s takes GET, not %s", endpoint, quote(r.Method)))
			return
		}
		v, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("agent: malformed query %s", quote(r.URL.RawQuery)))
			return
		}
		if endpoint == "/v1/status" {
			if len(v) > 0 {
				writeError(w, http.StatusBadRequest, errors.New("agent: /v1/status takes no parameters"))
				return
			}
			st := src.Status()
			st.Version = version
			writeJSON(w, http.StatusOK, st)
			return
		}
		q, err := query.Parse(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		if !src.HasDevice(q.Device) {
			if st := src.Status(); len(st.Devices) == 0 && st.ScanError != "" {
				// No device is known because none can be listed: that is
				// the answer, not that this one is missing.
				writeError(w, http.StatusServiceUnavailable, fmt.Errorf("agent: cannot list the RDMA devices to find %s: %s", quote(q.Device), st.ScanError))
				return
			}
			writeError(w, http.StatusNotFound, fmt.Errorf("agent: no RDMA device %s", quote(q.Device)))
			return
		}
		// The answer begins before the evaluation, which takes seconds
		// when every finding of tens of thousands of QPs is listed: the
		// client's wait for the answer to begin (qp-leaks' 10 s) is for an
		// agent that does not answer at all.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(w).Flush() // a client gone away shows at the next write
		rep, ok := src.Report(q)
		if !ok {
			// Removed since HasDevice: the status has gone out, so the
			// error is the body, which the client looks for.
			writeErrorBody(w, fmt.Errorf("agent: no RDMA device %s (removed while answering)", quote(q.Device)))
			return
		}
		rep.Source = "agent"
		writeReport(w, rep)
		if rep.FindingsTotal >= bigAnswer {
			// The heap grew by what the evaluation made, every finding
			// whatever the limit kept: give it back to the OS now (rep is
			// dead here), not over the minutes the runtime would take.
			debug.FreeOSMemory()
		}
	})
}

// bigAnswer is the number of findings evaluated from which an answer's
// memory is returned to the OS once it is written: about 1.5 KiB a finding
// listed, 15 MiB, and less for one only counted in the summary.
const bigAnswer = 10000

// writeReport writes rep as the body of an answer whose status has gone
// out, encoding its findings one at a time: the answer about 60k findings
// is 40 MB of JSON, which is never held whole.
func writeReport(w http.ResponseWriter, rep CheckReport) {
	findings := rep.Findings
	rep.Findings = []leakwatch.Finding{}
	head, err := json.Marshal(rep)
	// The only key "findings" with a list is the report's own: JSON
	// strings cannot hold an unescaped quote, and Group's count is a number.
	at := bytes.Index(head, []byte(`"findings":[]`))
	if err != nil || at < 0 {
		rep.Findings = findings
		_ = json.NewEncoder(w).Encode(rep) // an error: the client went away, nothing to do
		return
	}
	at += len(`"findings":[`)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(head[:at])
	for i := range findings {
		if i > 0 {
			bw.WriteByte(',')
		}
		b, err := json.Marshal(&findings[i])
		if err != nil {
			return // not for these types; the client sees a cut answer
		}
		bw.Write(b)
	}
	bw.Write(head[at:])
	bw.WriteByte('\n')
	_ = bw.Flush() // an error: the client went away, nothing to do
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

// maxErrorText bounds an error answer's text: errors of other packages
// quote what they refuse in full.
const maxErrorText = 512

func writeError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	writeErrorBody(w, err)
}

// writeErrorBody writes err as an error answer's body: {"error":"..."}
// and nothing before it, which is what the client looks for in an answer
// whose status said OK (errorPrefix).
func writeErrorBody(w http.ResponseWriter, err error) {
	msg := err.Error()
	if len(msg) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + fmt.Sprintf("... (%d bytes cut)", len(msg)-cut)
	}
	_ = json.NewEncoder(w).Encode(apiError{Error: msg}) // an error: the client went away, nothing to do
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // an error: the client went away, nothing to do
}
