package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/opfile"
)

// DefaultStateFile is where the agent keeps its history across restarts:
// in the systemd unit's StateDirectory=rdmatool.
const DefaultStateFile = "/var/lib/rdmatool/state.json"

// DefaultStateInterval is RunOptions.StateInterval's default.
const DefaultStateInterval = 5 * time.Minute

// maxStateSize bounds the state file, written and read: 1 GiB, some two
// million QPs at the 420 bytes or so each takes.
const maxStateSize = 1 << 30

// stateMagic says what the state file is, in its first line.
const stateMagic = "rdmatool agent state"

// stateChange is how many live QPs more or fewer than at the last save
// (or a tenth of those, when more) save the history before its interval
// is up: the QPs of a leak that grows keep their ages across a restart.
const stateChange = 1000

// stateHeader is the state file's first line: what the file is (Magic,
// and the Version of the leakwatch records that follow, one a line:
// leakwatch.SavedVersion), the boot it was saved in (the kernel's
// boot_id: no QP outlives a boot, and after one the same numbers, PDs and
// even PIDs come again), when, and by which agent.
type stateHeader struct {
	Magic   string    `json:"magic"`
	Version int       `json:"version"`
	BootID  string    `json:"boot_id"`
	Saved   time.Time `json:"saved"`
	Agent   string    `json:"agent"`
}

// stateFile keeps the agent's history in a file across restarts
// (RunOptions.StateFile).
type stateFile struct {
	path    string
	boot    string // this boot's boot_id ("" when /proc does not say)
	version string // the agent's
	maxSize int64
	log     *slog.Logger
	// When the last save was tried and the live QPs then, and whether it
	// failed (logged once, until a save succeeds again).
	savedAt  time.Time
	savedQPs int
	failing  bool
	// reconciled says what became of the restored histories was logged.
	reconciled bool
}

// newStateFile keeps the history at path; procRoot is where the boot's
// id is read (its sys/kernel/random/boot_id).
func newStateFile(path, procRoot, version string, log *slog.Logger) *stateFile {
	f := &stateFile{path: path, version: version, maxSize: maxStateSize, log: log}
	if procRoot != "" {
		if b, err := os.ReadFile(filepath.Join(procRoot, "sys/kernel/random/boot_id")); err == nil {
			f.boot = strings.TrimSpace(string(b))
		}
	}
	return f
}

// load restores the history st holds, which has observed nothing yet, from
// the file, read through opfile (a regular file, not a link, at most
// maxSize bytes) and decoded a line at a time. A file missing, from
// another boot, or that is not a state file this agent reads (another
// kind of file, another version, records cut short or corrupt) is logged
// once and leaves the history empty; nothing in it stops the agent. The
// new files a save interrupted (by a crash) left are removed.
func (f *stateFile) load(st *state, now time.Time) {
	f.savedAt = now
	f.removeLeftovers()
	began := time.Now()
	h, n, err := f.read(st)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f.log.Info("no state file: the history starts empty", "path", f.path)
	case err != nil:
		f.log.Warn("state file ignored: the history starts empty", "path", f.path, "err", err)
	case h.BootID != f.boot:
		f.log.Info("state file from another boot: the history starts empty", "path", f.path, "saved", h.Saved, "boot_id", h.BootID)
	default:
		f.log.Info("history restored", "path", f.path, "qps", n, "saved", h.Saved, "agent_version", h.Agent,
			"duration_seconds", time.Since(began).Seconds())
	}
}

// read restores the history from the file unless it was saved in another
// boot, and returns its header and the QP histories it held.
func (f *stateFile) read(st *state) (stateHeader, int, error) {
	var h stateHeader
	failed := func(err error) (stateHeader, int, error) {
		return h, 0, fmt.Errorf("agent: load state %s: %w", f.path, opfileCause(err))
	}
	r, err := opfile.Open(f.path, f.maxSize, false)
	if err != nil {
		return failed(err)
	}
	defer r.Close() //nolint:errcheck // read only
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return failed(fmt.Errorf("not an rdmatool agent state file: %w", err))
	}
	if h.Magic != stateMagic {
		return failed(fmt.Errorf("not an rdmatool agent state file: magic %s", quote.String(h.Magic)))
	}
	if !leakwatch.ReadsSavedVersion(h.Version) {
		return failed(fmt.Errorf("version %d; this agent reads versions 1 to %d", h.Version, leakwatch.SavedVersion))
	}
	if h.BootID != f.boot {
		return h, 0, nil
	}
	n, err := st.Restore(dec.Decode)
	if err != nil {
		return failed(err)
	}
	return h, n, nil
}

// removeLeftovers removes the new files of saves that did not end
// (writeAtomic's): regular files named after the state file's own
// temporary names, in its directory.
func (f *stateFile) removeLeftovers() {
	dir, prefix := filepath.Dir(f.path), "."+filepath.Base(f.path)+"."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), prefix) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// save writes the history st holds to the file, whole or not at all, and
// returns the QP histories and bytes written.
func (f *stateFile) save(st *state, now time.Time) (qps int, size int64, err error) {
	size, err = writeAtomic(f.path, f.maxSize, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		h := stateHeader{Magic: stateMagic, Version: leakwatch.SavedVersion, BootID: f.boot, Saved: now.UTC(), Agent: f.version}
		if err := enc.Encode(h); err != nil {
			return err
		}
		qps, err = st.Save(enc.Encode)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("agent: save state %s: %w", f.path, err)
	}
	return qps, size, nil
}

// saveLogged saves the history and logs it: a failure once until a save
// succeeds again, and every failure when the agent stops (last); a save
// at Debug, the last one at Info.
func (f *stateFile) saveLogged(st *state, now time.Time, last bool) {
	began := time.Now()
	live := st.State.Status().QPs
	qps, size, err := f.save(st, now)
	f.savedAt, f.savedQPs = now, live // a failed save is tried again at the next interval
	switch {
	case err != nil && (last || !f.failing):
		f.log.Warn("saving the history failed: it will not survive a restart", "path", f.path, "err", err)
	case err == nil && f.failing:
		f.log.Info("saving the history succeeded again", "path", f.path, "qps", qps, "bytes", size)
	case err == nil:
		level := slog.LevelDebug
		if last {
			level = slog.LevelInfo
		}
		f.log.Log(context.Background(), level, "history saved", "path", f.path, "qps", qps, "bytes", size,
			"duration_seconds", time.Since(began).Seconds())
	}
	f.failing = err != nil
}

// keep saves the history every interval, and sooner when the live QPs
// changed by stateChange, or a tenth, since the last save, looking every
// check, until ctx ends. It logs once what became of the histories
// restored at the start, when their devices have all been scanned.
func (f *stateFile) keep(ctx context.Context, st *state, interval, check time.Duration, now func() time.Time) {
	tick := time.NewTicker(check)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f.logReconciled(st)
		live := st.State.Status().QPs
		if now().Sub(f.savedAt) >= interval || abs(live-f.savedQPs) >= max(stateChange, f.savedQPs/10) {
			f.saveLogged(st, now(), false)
		}
	}
}

// logReconciled logs, once, what became of the restored histories, when
// none waits for its device's first scan any more.
func (f *stateFile) logReconciled(st *state) {
	if f.reconciled {
		return
	}
	r := st.Restored()
	if r.Waiting > 0 {
		return
	}
	f.reconciled = true
	if r.QPs > 0 {
		f.log.Info("restored histories reconciled", "qps", r.QPs, "kept", r.Kept, "new", r.New, "gone", r.Gone)
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// errTooLarge is writeAtomic's refusal to write past its cap.
var errTooLarge = errors.New("too large")

// writeAtomic writes the file at path through write, whole or not at all:
// into a new file in the same directory (mode 0600, made with O_EXCL, so
// no link is followed), synced, renamed over path (which replaces a link
// there rather than follow it), then the directory synced. Writing more
// than maxSize bytes fails. On any error path is as it was and the new
// file is removed. It returns the bytes written.
func writeAtomic(path string, maxSize int64, write func(io.Writer) error) (size int64, err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			tmp.Close() //nolint:errcheck // the error that matters is err
			os.Remove(tmp.Name())
		}
	}()
	w := &cappedWriter{w: bufio.NewWriterSize(tmp, 256<<10), left: maxSize, maxSize: maxSize}
	if err = write(w); err != nil {
		return 0, err
	}
	if err = w.w.Flush(); err != nil {
		return 0, err
	}
	if err = tmp.Sync(); err != nil {
		return 0, err
	}
	if err = tmp.Close(); err != nil {
		return 0, err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return 0, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer d.Close() //nolint:errcheck // only synced
	if err = d.Sync(); err != nil {
		return 0, err
	}
	return maxSize - w.left, nil
}

// cappedWriter writes to a buffered file at most left bytes more, of
// maxSize.
type cappedWriter struct {
	w             *bufio.Writer
	left, maxSize int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("%w: more than %d bytes", errTooLarge, c.maxSize)
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}
