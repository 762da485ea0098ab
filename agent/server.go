package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rdmatool/rdmatool/agent/query"
	"github.com/rdmatool/rdmatool/leakwatch"
)

// The socket speaks HTTP/1.1:
//
//	GET /v1/qp-leaks?dev=D&min_age=5s&rule=R&rule=R2&max_qp=D=N&no_probes=1&limit=N
//	GET /v1/status
//
// Both answer a JSON object. /v1/qp-leaks returns the CheckReport that
// `rdmatool qp-leaks -j` prints, with "source":"agent"; every parameter is
// optional (min_age defaults to 5s, like the CLI). Errors are one JSON
// object, {"error":"..."}: 400 for a bad or malformed query, 404 for a
// device the agent does not see or a path it does not serve (paths are
// taken as they come, never cleaned or redirected), 405 with Allow: GET,
// HEAD for another method. Values quoted back in an error are cut at
// query.MaxQuoted bytes; package query reads the parameters.

// defaultMinAge is min_age when a query leaves it out.
const defaultMinAge = query.DefaultMinAge

// quote is s for an error message, cut at query.MaxQuoted bytes.
func quote(s string) string { return query.Quote(s) }

// NewHandler serves the agent's API from st.
func NewHandler(st *State) http.Handler {
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
			writeJSON(w, http.StatusOK, st.Status())
			return
		}
		q, err := query.Parse(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		if !st.HasDevice(q.Device) {
			writeError(w, http.StatusNotFound, fmt.Errorf("agent: no RDMA device %s", quote(q.Device)))
			return
		}
		// The answer begins before the evaluation, which takes seconds
		// when every finding of tens of thousands of QPs is listed: the
		// client's wait for the answer to begin (qp-leaks' 10 s) is for an
		// agent that does not answer at all.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush() // a client gone away shows at the next write
		rep, ok := st.Report(q)
		if !ok {
			// Removed since HasDevice: the status has gone out, so the
			// error is the body, which the client looks for.
			writeErrorBody(w, fmt.Errorf("agent: no RDMA device %s (removed while answering)", quote(q.Device)))
			return
		}
		writeReport(w, rep)
		if len(rep.Findings) >= bigAnswer {
			// The heap grew by what the answer held: give it back to the
			// OS now (rep is dead here), not over the minutes the runtime
			// would take.
			debug.FreeOSMemory()
		}
	})
}

// bigAnswer is the number of findings from which an answer's memory is
// returned to the OS once it is written: about 1.5 KiB a finding, 15 MiB.
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
		json.NewEncoder(w).Encode(rep) // the client went away: nothing to do
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
	bw.Flush() // the client went away: nothing to do
}

// AnswerWriteTimeout is how long the agent takes at most to write an
// answer, from reading the request: a report about tens of thousands of
// QPs, every finding listed, takes seconds.
const AnswerWriteTimeout = time.Minute

// newServer is the agent's HTTP server for h: it closes connections idle
// for longer than idle, and gives a client a bounded time to send its
// request and read the answer.
func newServer(h http.Handler, log *slog.Logger, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      AnswerWriteTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
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
	json.NewEncoder(w).Encode(apiError{Error: msg}) // the client went away: nothing to do
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) // the client went away: nothing to do
}

// Listen makes the agent's socket at path: its directory is created 0755
// when missing, a stale socket left by an agent that died is replaced, and
// the socket is 0600 before it can accept anyone (it is made in a private
// directory and renamed into place). Closing the listener removes the
// file. Listen fails when another agent answers on path or when path is
// something other than a socket.
func Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: create %s: %w", dir, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("agent: listen on %s: %w (not a socket, left alone)", path, os.ErrExist)
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("agent: listen on %s: another agent is listening", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("agent: remove stale socket %s: %w", path, err)
		}
	}
	tmp, err := os.MkdirTemp(dir, ".agent-")
	if err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	staged := filepath.Join(tmp, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: staged, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // the file moves; closeRemove removes it
	if err := os.Chmod(staged, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	if err := os.Rename(staged, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	return &socketListener{UnixListener: ln, path: path, file: fi}, nil
}

// socketListener removes its socket file on Close, unless another agent
// has replaced it meanwhile.
type socketListener struct {
	*net.UnixListener
	path string
	file os.FileInfo
	once sync.Once
	err  error
}

func (l *socketListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.file) {
			os.Remove(l.path)
		}
	})
	return l.err
}
