package agentapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"syscall"
	"time"

	iquote "github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
)

// ErrNoAgent is returned, wrapped, when no agent listens on the socket: the
// file does not exist or nothing accepts connections on it.
var ErrNoAgent = errors.New("no agent is listening")

// AskError is a failed question to the agent: no agent (it wraps
// ErrNoAgent), a refused connection, an error answer, or an answer that is
// not the agent's.
type AskError struct {
	Socket string
	Err    error
}

// Error reads "agent: ask SOCKET: cause", as qp-leaks has always printed it.
func (e *AskError) Error() string { return "agent: ask " + e.Socket + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *AskError) Unwrap() error { return e.Err }

// dialError marks errors of connecting to the socket, so that only they can
// mean ErrNoAgent.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// answerIdle is how long the client waits at most for the next bytes of
// the agent's answer, from the connection on: an agent that stalls is an
// error after it, whatever ctx allows. Between the headers and the body
// the agent evaluates the rules, which takes seconds about tens of
// thousands of QPs.
const answerIdle = 30 * time.Second

// stallError is an agent that sent nothing for idle in the middle of its
// answer (or before it, without a headerTimeout). It matches
// os.ErrDeadlineExceeded.
type stallError struct {
	idle time.Duration
	err  error
}

func (e *stallError) Error() string {
	return "the agent sent nothing for " + e.idle.String()
}
func (e *stallError) Unwrap() error { return e.err }

// idleConn is a connection whose every read must return within idle.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = &stallError{c.idle, err}
	}
	return n, err
}

// get asks the agent on socket for path and decodes the JSON answer into v.
// A headerTimeout above 0 bounds the wait for the answer to begin, idle
// the wait for each next read of it from the connection on (Ask and
// AskStatus give answerIdle), and ctx the whole exchange.
func get(ctx context.Context, socket, path string, query url.Values, v any, headerTimeout, idle time.Duration) error {
	tr := &http.Transport{
		ResponseHeaderTimeout: headerTimeout,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, &dialError{err}
			}
			return &idleConn{Conn: c, idle: idle}, nil
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	u := url.URL{Scheme: "http", Host: "rdmatool-agent", Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return &AskError{socket, err}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		var de *dialError
		if errors.As(err, &de) && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return &AskError{socket, fmt.Errorf("%w (%w)", ErrNoAgent, de.err)}
		}
		var se *stallError
		if errors.As(err, &se) {
			return &AskError{socket, se}
		}
		return &AskError{socket, err}
	}
	defer resp.Body.Close()
	body := &readErr{r: http.MaxBytesReader(nil, resp.Body, maxAnswer)}
	if resp.StatusCode != http.StatusOK {
		var e apiError
		if json.NewDecoder(body).Decode(&e) == nil && e.Error != "" {
			return &AskError{socket, fmt.Errorf("%s (HTTP %d)", iquote.Line(e.Error), resp.StatusCode)}
		}
		return &AskError{socket, fmt.Errorf("HTTP %s", iquote.Line(resp.Status))}
	}
	// The answer is decoded as it comes, not read whole first: a report
	// of tens of MB costs what it decodes to.
	br := bufio.NewReaderSize(body, 64<<10)
	// An error found once the answer had begun (the device named went
	// away) is its body. A report starts with another key.
	if p, _ := br.Peek(len(errorPrefix)); bytes.Equal(p, errorPrefix) {
		var e apiError
		if json.NewDecoder(br).Decode(&e) == nil && e.Error != "" {
			return &AskError{socket, errors.New(iquote.Line(e.Error))}
		}
		return &AskError{socket, fmt.Errorf("decode the answer: an error answer without its error")}
	}
	dec := json.NewDecoder(br)
	err = dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("more after the answer's JSON value")
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return &AskError{socket, errAnswerTooLarge}
	case body.err != nil && errors.Is(err, body.err):
		return &AskError{socket, fmt.Errorf("read the answer: %w", err)}
	}
	return &AskError{socket, fmt.Errorf("decode the answer: %w", err)}
}

// maxAnswer bounds what get reads of an answer (http.MaxBytesReader): a
// report with every finding (--limit 0) of a big host is tens of MB; more
// is not an agent's.
var maxAnswer int64 = 256 << 20

// errAnswerTooLarge is an answer longer than maxAnswer.
var errAnswerTooLarge = fmt.Errorf("the agent's answer is larger than %d MiB: ask for less (--limit, --dev)", maxAnswer>>20)

// readErr passes r's reads on and keeps the last error other than EOF,
// so that a decoder's error can be told a read's (the agent stalled, the
// answer's cap) from the answer's own.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}

// errorPrefix begins an error answer (apiError as encoding/json writes it).
var errorPrefix = []byte(`{"error":`)

// Ask asks the agent listening on socket for its qp-leaks report on q:
// Device, MinAge, Rules, MaxQP, Limit, and SkipProbeRules, which asks the
// agent to skip the rules that need probes (no_probes=1; the agent gives
// its own reason). Each is not sent. The caller's ctx bounds the wait,
// timeout (above 0) the wait for the answer to begin, and 30 seconds the
// wait for each next part of it once it has begun. A missing socket, or
// one nobody accepts on, gives an error wrapping ErrNoAgent; every failure
// is an *AskError.
func Ask(ctx context.Context, socket string, q leakwatch.Query, timeout time.Duration) (CheckReport, error) {
	v := url.Values{}
	if q.Device != "" {
		v.Set("dev", q.Device)
	}
	v.Set("min_age", q.MinAge.String())
	for _, r := range q.Rules {
		v.Add("rule", r)
	}
	for dev, n := range q.MaxQP {
		v.Add("max_qp", dev+"="+strconv.FormatUint(n, 10))
	}
	if q.SkipProbeRules != "" {
		v.Set("no_probes", "1")
	}
	v.Set("limit", strconv.Itoa(q.Limit))
	var rep CheckReport
	if err := get(ctx, socket, "/v1/qp-leaks", v, &rep, timeout, answerIdle); err != nil {
		return CheckReport{}, err
	}
	if rep.Source != "agent" || rep.Findings == nil || rep.ObservedSince.IsZero() {
		return CheckReport{}, &AskError{socket, errors.New("the answer is not an agent report")}
	}
	return rep, nil
}

// AskStatus asks the agent listening on socket for its status (the
// devices it lists, and why it cannot list them), waiting at most 30
// seconds for each part of the answer. Its errors are Ask's.
func AskStatus(ctx context.Context, socket string) (Status, error) {
	var st Status
	if err := get(ctx, socket, "/v1/status", nil, &st, 0, answerIdle); err != nil {
		return Status{}, err
	}
	if st.Started.IsZero() {
		return Status{}, &AskError{socket, errors.New("the answer is not an agent status")}
	}
	return st, nil
}
