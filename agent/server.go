package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmatool/rdmatool/agentapi"
	"github.com/rdmatool/rdmatool/internal/quote"
	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"
)

// The agent serves agentapi.Handler on its unix socket: this file makes
// the socket and the server around the handler.

// newServer is the agent's HTTP server for h: it closes connections idle
// for longer than idle, and gives a client a bounded time to send its
// request and read the answer. conns counts the connections it serves.
func newServer(h http.Handler, log *slog.Logger, idle time.Duration, conns *atomic.Int64) *http.Server {
	return &http.Server{
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				conns.Add(-1)
			}
		},
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      agentapi.AnswerWriteTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// maxHeaderBytes bounds a request's header: the agent's requests are a
// GET line with a short query (net/http allows 4 KiB more).
const maxHeaderBytes = 16 << 10

// maxConns is how many connections each of the agent's listeners (its
// socket, /metrics) serves at once; more wait in the kernel's backlog
// until one ends. A connection costs the agent at most about 40 KiB (its
// goroutine's stack, net/http's 4 KiB read and write buffers, a header
// of up to maxHeaderBytes and 4 KiB), so idle or slow connections of a
// local user who owes the agent nothing hold at most about 2.5 MiB a
// listener, for at most ReadHeaderTimeout (a request never sent) or idle
// (between requests) each.
const maxConns = 64

// serveLimited serves srv on ln, maxConns connections at once.
func serveLimited(srv *http.Server, ln net.Listener) error {
	return srv.Serve(netutil.LimitListener(ln, maxConns))
}

// listen makes the agent's socket at path: its directory is created 0755
// when missing, a stale socket left by an agent that died is replaced, and
// the socket is 0600 before it can accept anyone (it is made in a private
// directory and renamed into place). Closing the listener removes the
// file. listen fails when path is longer than a unix socket's path can be
// (agentapi.CheckSocketPath), when another agent answers on path, or when
// path is something other than a socket.
//
// The socket is bound through the private directory's descriptor
// (/proc/self/fd/N/s), so that the staged path is no longer than path
// whatever the directory's: a path a unix socket can have is one the agent
// can listen on. Without /proc it is bound at its own path, which must
// then fit too.
func listen(path string) (net.Listener, error) {
	if err := agentapi.CheckSocketPath(path); err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", quote.String(path), err)
	}
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
	ln, err := bindStaged(tmp, staged)
	if err != nil {
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // the file moves; closeRemove removes it
	if err := os.Chmod(staged, 0o600); err != nil {
		_ = ln.Close() // the error returned says what failed
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	if err := os.Rename(staged, path); err != nil {
		_ = ln.Close() // the error returned says what failed
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		_ = ln.Close() // the error returned says what failed
		return nil, fmt.Errorf("agent: listen on %s: %w", path, err)
	}
	return &socketListener{UnixListener: ln, path: path, file: fi}, nil
}

// bindStaged binds a unix socket at staged, the file s in the directory
// tmp: through tmp's descriptor in /proc/self/fd where there is one, at
// staged itself where not.
func bindStaged(tmp, staged string) (*net.UnixListener, error) {
	fd, err := unix.Open(tmp, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	defer unix.Close(fd)
	viaFD := "/proc/self/fd/" + strconv.Itoa(fd) + "/s"
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: viaFD, Net: "unix"})
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return ln, err
	}
	if len(staged) > agentapi.MaxSocketPath { // no /proc, and too long
		return nil, fmt.Errorf("bind %s: without /proc/self/fd the socket is made at this path, longer than the %d bytes a unix socket's path holds", staged, agentapi.MaxSocketPath)
	}
	return net.ListenUnix("unix", &net.UnixAddr{Name: staged, Net: "unix"})
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
