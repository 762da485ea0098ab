package agentapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// stallingAgent serves, on a socket in a temporary directory until the test
// ends, an agent that answers every request with status 200 and headers
// (unless stallHeaders), the body part (Content-Length 1000 unless
// chunked), and then nothing more.
func stallingAgent(t *testing.T, stallHeaders, chunked bool, part string) string {
	t.Helper()
	return serveWith(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !stallHeaders {
			w.Header().Set("Content-Type", "application/json")
			if !chunked {
				w.Header().Set("Content-Length", "1000")
			}
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(part))
			http.NewResponseController(w).Flush()
		}
		<-r.Context().Done() // the server's Close at the end of the test
	})})
}

// An agent that stalls, after its headers or before them, is an error
// once it has sent nothing for the idle time, even under a context without
// a deadline: qp-leaks waited forever on one.
func TestGetStalled(t *testing.T) {
	tests := []struct {
		name                  string
		stallHeaders, chunked bool
		part                  string
	}{
		{name: "after the headers"},
		{name: "within the body", part: `{"findings":[`},
		{name: "within a chunked body", chunked: true, part: `{"findings":[`},
		{name: "before the headers", stallHeaders: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := stallingAgent(t, tt.stallHeaders, tt.chunked, tt.part)
			const idle = 200 * time.Millisecond
			errc := make(chan error, 1)
			go func() {
				var st Status
				errc <- get(context.Background(), sock, "/v1/status", nil, &st, 0, idle)
			}()
			select {
			case err := <-errc:
				var ae *AskError
				if !errors.As(err, &ae) || !errors.Is(err, os.ErrDeadlineExceeded) ||
					!strings.HasSuffix(err.Error(), sock+": the agent sent nothing for 200ms") && !strings.HasSuffix(err.Error(), sock+": read the answer: the agent sent nothing for 200ms") {
					t.Errorf("get from an agent that stalls %s: %v; want an *AskError saying it sent nothing for 200ms", tt.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("get from an agent that stalls %s: still waiting after 30s", tt.name)
			}
		})
	}
}

// An answer larger than maxAnswer is an error that says so, not a JSON
// value cut short; one within it decodes, whatever it takes of the cap;
// an agent's error of a megabyte is cut for the terminal.
func TestGetAnswerSize(t *testing.T) {
	big := `{"findings":[` + strings.Repeat(`{"rule":"stale-qp"},`, 250) + `{"rule":"stale-qp"}]}`
	serveBody := func(code int, body string) string {
		return serveWith(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			w.Write([]byte(body))
		})})
	}
	defer func(n int64) { maxAnswer = n }(maxAnswer)
	maxAnswer = int64(len(big))
	var rep CheckReport
	if err := get(t.Context(), serveBody(http.StatusOK, big), "/v1/qp-leaks", nil, &rep, 0, time.Second); err != nil || len(rep.Findings) != 251 {
		t.Errorf("an answer of maxAnswer bytes: %v, %d findings; want 251", err, len(rep.Findings))
	}
	maxAnswer = int64(len(big)) - 1
	err := get(t.Context(), serveBody(http.StatusOK, big), "/v1/qp-leaks", nil, &rep, 0, time.Second)
	if !errors.Is(err, errAnswerTooLarge) || !strings.Contains(err.Error(), "the agent's answer is larger than 256 MiB: ask for less (--limit, --dev)") {
		t.Errorf("an answer over maxAnswer: %v, want errAnswerTooLarge", err)
	}
	maxAnswer = 256 << 20
	if err := get(t.Context(), serveBody(http.StatusOK, big+`{}`), "/v1/qp-leaks", nil, &rep, 0, time.Second); err == nil ||
		!strings.Contains(err.Error(), "decode the answer: more after the answer's JSON value") {
		t.Errorf("an answer with more after its value: %v", err)
	}
	long := strings.Repeat("e", 1<<20)
	for _, code := range []int{http.StatusOK, http.StatusNotFound} {
		err := get(t.Context(), serveBody(code, `{"error":"`+long+`\u001b[2J"}`), "/v1/qp-leaks", nil, &rep, 0, time.Second)
		if err == nil || len(err.Error()) > 1024 || !strings.Contains(err.Error(), "… (1048580 bytes)") || code == http.StatusNotFound && !strings.HasSuffix(err.Error(), "(HTTP 404)") {
			t.Errorf("HTTP %d, an error of 1 MiB: %.200q (%d bytes), want it cut", code, err, len(fmt.Sprint(err)))
		}
	}
}
