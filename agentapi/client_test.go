package agentapi

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stallingAgent listens on a socket in a temporary directory and, to
// every connection, sends what (part of an answer, or nothing) and then
// nothing more until the test ends.
func stallingAgent(t *testing.T, what string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() {
				buf := make([]byte, 4096)
				c.Read(buf) // the request
				c.Write([]byte(what))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return sock
}

// An agent that stalls, after its headers or before them, is an error
// once it has sent nothing for the idle time, even under a context without
// a deadline: qp-leaks waited forever on one.
func TestGetStalled(t *testing.T) {
	tests := []struct {
		name string
		sent string
	}{
		{"after the headers", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"},
		{"within the body", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"findings\":["},
		{"chunked", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"fin\r\n"},
		{"before the headers", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := stallingAgent(t, tt.sent)
			const idle = 200 * time.Millisecond
			errc := make(chan error, 1)
			go func() {
				var st Status
				errc <- get(context.Background(), sock, "/v1/status", nil, &st, 0, idle)
			}()
			select {
			case err := <-errc:
				var ae *AskError
				if !errors.As(err, &ae) || !errors.Is(err, os.ErrDeadlineExceeded) || !strings.HasSuffix(err.Error(), sock+": the agent sent nothing for 200ms") && !strings.HasSuffix(err.Error(), sock+": read the answer: the agent sent nothing for 200ms") {
					t.Errorf("get from an agent that stalls %s: %v; want an *AskError saying it sent nothing for 200ms", tt.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("get from an agent that stalls %s: still waiting after 30s", tt.name)
			}
		})
	}
}
