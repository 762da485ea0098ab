package agent

import (
	"bufio"
	"bytes"
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
	"syscall"
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

// stateSaveTimeout bounds a save's writing (encoding, write, sync and
// rename), or the state interval when that is shorter: a save whose
// writing has not returned by then is given up, and no other begins
// until it has returned.
const stateSaveTimeout = 30 * time.Second

// stateStopTimeout bounds the save when the agent stops, from the stop's
// start (SIGTERM), its wait for a save that has not returned included:
// well under the time systemd gives a unit to stop (TimeoutStopSec, 90 s
// unless set; the unit sets none), after which the agent stops without it.
const stateStopTimeout = 10 * time.Second

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
// (RunOptions.StateFile). One goroutine at a time uses it (keep, then Run
// as it stops); a save's writing runs on a goroutine of its own.
type stateFile struct {
	path    string
	boot    string // this boot's boot_id ("" when /proc does not say)
	version string // the agent's
	maxSize int64
	log     *slog.Logger
	// write writes the file: writeAtomic, or a test's that blocks.
	write func(path string, maxSize int64, write func(io.Writer) error) (int64, error)
	// When the last save was tried and the live QPs then, and whether it
	// failed or timed out (logged once, until a save succeeds again).
	savedAt  time.Time
	savedQPs int
	failing  bool
	// writing gives the result of the save whose writing runs, nil when
	// none runs; givenUp says that save timed out (and was counted so).
	writing chan saveResult
	givenUp bool
	// reconciled says what became of the restored histories was logged.
	reconciled bool
}

// saveResult is what a save's writing returned, and how long the save
// took from the copy of the history on.
type saveResult struct {
	qps  int
	size int64
	err  error
	took time.Duration
}

// newStateFile keeps the history at path; procRoot is where the boot's
// id is read (its sys/kernel/random/boot_id).
func newStateFile(path, procRoot, version string, log *slog.Logger) *stateFile {
	f := &stateFile{path: path, version: version, maxSize: maxStateSize, log: log, write: writeAtomic}
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
		// Cut: a record's value of up to maxRecord bytes may be in it.
		f.log.Warn("state file ignored: the history starts empty", "path", f.path, "err", quote.Line(err.Error()))
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
	records := newRecordReader(r)
	if err := records.decode(&h); err != nil {
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
	n, err := st.Restore(records.decode)
	if err != nil {
		return failed(err)
	}
	return h, n, nil
}

// ErrStateInUse is a state file another agent keeps: lock's error.
var ErrStateInUse = errors.New("in use by another agent")

// lock takes the state file's lock, an flock on PATH.lock (made 0600
// beside it, and left there), until release: a second agent started on
// the same file fails with ErrStateInUse instead of the two writing over
// each other's history. The lock dies with its process. Where the lock
// file cannot be made (the directory missing or read-only, where saves
// fail too) the agent runs on unlocked, and says so.
func (f *stateFile) lock() (release func(), err error) {
	path := f.path + ".lock"
	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		f.log.Warn("state file not locked: a second agent on it would not be refused", "path", path, "err", err)
		return func() {}, nil
	}
	if err := syscall.Flock(int(file.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = file.Close() // the lock's error is returned
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("agent: state file %s: %w (%s is locked)", f.path, ErrStateInUse, path)
		}
		return nil, fmt.Errorf("agent: lock state file %s: %w", path, err)
	}
	return func() { _ = file.Close() }, nil // closing the file releases the lock
}

// maxRecord bounds a line of the state file (a record: the header, a
// device, an owner, a site, a QP): the largest a save writes is some
// kilobytes, so a loader holds at most a few MiB whatever the file's size.
const maxRecord = 1 << 20

// recordReader decodes the state file's records, one JSON value a line
// (as json.Encoder writes them), each line at most maxRecord bytes (a
// bufio.Scanner's token limit): a value of hundreds of MB on one line is
// refused as it is read, not decoded.
type recordReader struct{ sc *bufio.Scanner }

func newRecordReader(r io.Reader) *recordReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxRecord)
	return &recordReader{sc}
}

// decode reads the next line into v, refusing fields v does not have;
// io.EOF when no line is left.
func (rr *recordReader) decode(v any) error {
	if !rr.sc.Scan() {
		switch err := rr.sc.Err(); {
		case errors.Is(err, bufio.ErrTooLong):
			return fmt.Errorf("a record longer than %d bytes", maxRecord)
		case err != nil:
			return err
		}
		return io.EOF
	}
	dec := json.NewDecoder(bytes.NewReader(rr.sc.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one value on a record's line")
	}
	return nil
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
// returns the QP histories and bytes written: writeSnapshot of a
// SaveSnapshot, on the caller's goroutine, unbounded.
func (f *stateFile) save(st *state, now time.Time) (qps int, size int64, err error) {
	return f.writeSnapshot(st.SaveSnapshot(), now)
}

// writeSnapshot writes the history snap holds to the file, whole or not
// at all, and returns the QP histories and bytes written. It reads only
// what does not change after newStateFile, so a save's goroutine runs it.
func (f *stateFile) writeSnapshot(snap *leakwatch.SaveSnapshot, now time.Time) (qps int, size int64, err error) {
	if err := mayReplace(f.path); err != nil {
		return 0, 0, fmt.Errorf("agent: save state %s: %w", f.path, err)
	}
	size, err = f.write(f.path, f.maxSize, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		h := stateHeader{Magic: stateMagic, Version: leakwatch.SavedVersion, BootID: f.boot, Saved: now.UTC(), Agent: f.version}
		if err := enc.Encode(h); err != nil {
			return err
		}
		qps, err = snap.Put(enc.Encode)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("agent: save state %s: %w", f.path, err)
	}
	return qps, size, nil
}

// errNotState is a save that would have replaced a file that is not a
// state file.
var errNotState = errors.New("the file there is not an rdmatool agent state file: not writing over it (point state_file elsewhere, or remove the file)")

// mayReplace says whether a save may replace what is at path: nothing, an
// empty file, a state file (its first line a header with stateMagic), or
// what is not a regular file (a link, a pipe: replaced, not followed).
// Any other file is an operator's (--state-file pointed at agent.yaml by
// mistake): errNotState, so that the save fails, is logged and counted,
// and the file stays.
func mayReplace(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && (!fi.Mode().IsRegular() || fi.Size() == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer file.Close() //nolint:errcheck // read only
	line, err := bufio.NewReader(io.LimitReader(file, 4096)).ReadSlice('\n')
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return err
	}
	var h struct {
		Magic string `json:"magic"`
	}
	if json.Unmarshal(line, &h) != nil || h.Magic != stateMagic {
		return errNotState
	}
	return nil
}

// start copies the history, with its lock held for the copy only (timed:
// rdmatool_state_save_lock_seconds), and writes the copy on a goroutine
// of its own, whose result comes on f.writing. That goroutine has no owner
// that waits for it, on purpose: on a file system that hangs (NFS, a dying
// disk, a frozen one) its writing may never return, its thread blocked in
// the kernel, and the agent must go on, and stop, anyway. At most one
// runs: no save starts while f.writing is set.
func (f *stateFile) start(st *state, now time.Time) {
	began := time.Now()
	snap := st.SaveSnapshot()
	st.saves.began(time.Since(began))
	res := make(chan saveResult, 1)
	f.writing, f.givenUp = res, false
	go func() {
		qps, size, err := f.writeSnapshot(snap, now)
		took := time.Since(began)
		st.saves.ended(took)
		res <- saveResult{qps: qps, size: size, err: err, took: took}
	}()
}

// await waits for the running save's result for at most d, or until ctx
// ends. A save that has not returned within d is given up: counted and
// logged as timed out (timedOut); one that ctx ended the wait for is
// neither, until a later wait takes its result.
func (f *stateFile) await(ctx context.Context, st *state, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-f.writing:
		f.returned(st, r, false)
	case <-timer.C:
		f.timedOut(st, d, false)
	case <-ctx.Done():
	}
}

// returned takes the result of the running save: counts it unless it was
// given up (counted then), and logs it: a failure once until a save
// succeeds again, and every failure when the agent stops (last); a save
// at Debug, the last one at Info.
func (f *stateFile) returned(st *state, r saveResult, last bool) {
	f.writing = nil
	if !f.givenUp {
		st.saves.count(r.err)
	}
	f.givenUp = false
	switch {
	case r.err != nil && (last || !f.failing):
		f.log.Warn("saving the history failed: it will not survive a restart", "path", f.path, "err", r.err)
	case r.err == nil && f.failing:
		f.log.Info("saving the history succeeded again", "path", f.path, "qps", r.qps, "bytes", r.size,
			"duration_seconds", r.took.Seconds())
	case r.err == nil:
		level := slog.LevelDebug
		if last {
			level = slog.LevelInfo
		}
		f.log.Log(context.Background(), level, "history saved", "path", f.path, "qps", r.qps, "bytes", r.size,
			"duration_seconds", r.took.Seconds())
	}
	f.failing = r.err != nil
}

// timedOut gives up the running save, which did not return within d:
// counted as a timeout, logged once until a save succeeds again, and
// when the agent stops (last), which it does without the history saved.
// The save's writing goes on; f.writing gives its result when it returns.
func (f *stateFile) timedOut(st *state, d time.Duration, last bool) {
	f.givenUp = true
	st.saves.count(errSaveTimeout)
	switch {
	case last:
		f.log.Warn("stopping without saving the history: its save did not end in time", "path", f.path, "timeout_seconds", d.Seconds())
	case !f.failing:
		f.log.Warn("saving the history timed out: it will not survive a restart until a save ends", "path", f.path,
			"timeout_seconds", d.Seconds())
	}
	f.failing = true
}

// errSaveTimeout is a save given up (timedOut).
var errSaveTimeout = errors.New("timed out")

// saveLogged saves the history, and waits for the save at most timeout or
// until ctx ends (the agent stops: saveLast waits for it then), unless
// the last save has not returned yet: then there is no save, and no
// second writer on a file system that hangs.
func (f *stateFile) saveLogged(ctx context.Context, st *state, now time.Time, timeout time.Duration) {
	if f.writing != nil {
		select {
		case r := <-f.writing:
			f.returned(st, r, false)
		default:
			return
		}
	}
	f.savedAt, f.savedQPs = now, st.State.Status().QPs // a failed save is tried again at the next interval
	f.start(st, now)
	f.await(ctx, st, timeout)
}

// saveLast saves the history when the agent stops, within bound of the
// stop's start (began; and at least a tenth of bound from now, for a save
// that a slow stop left no time): it waits for a save that has not
// returned, then for its own. When the bound is reached first it logs
// that the history was not saved and returns: SIGTERM is never held
// longer than that by a file system that hangs.
func (f *stateFile) saveLast(st *state, now, began time.Time, bound time.Duration) {
	timer := time.NewTimer(max(time.Until(began.Add(bound)), bound/10))
	defer timer.Stop()
	if f.writing != nil {
		select {
		case r := <-f.writing:
			f.returned(st, r, false)
		case <-timer.C:
			f.log.Warn("stopping without saving the history: an earlier save has not ended", "path", f.path, "timeout_seconds", bound.Seconds())
			return
		}
	}
	f.start(st, now)
	select {
	case r := <-f.writing:
		f.returned(st, r, true)
	case <-timer.C:
		f.timedOut(st, bound, true)
	}
}

// keep saves the history every interval, and sooner when the live QPs
// changed by stateChange, or a tenth, since the last save, looking every
// check, until ctx ends; a save is given up after stateSaveTimeout, or
// interval when shorter. It logs once what became of the histories
// restored at the start, when their devices have all been scanned.
func (f *stateFile) keep(ctx context.Context, st *state, interval, check time.Duration, now func() time.Time) {
	tick := time.NewTicker(check)
	defer tick.Stop()
	timeout := min(stateSaveTimeout, interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f.logReconciled(st)
		live := st.State.Status().QPs
		if now().Sub(f.savedAt) >= interval || abs(live-f.savedQPs) >= max(stateChange, f.savedQPs/10) {
			f.saveLogged(ctx, st, now(), timeout)
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
// than maxSize bytes fails. On an error before the rename, path is as it
// was and the new file is removed; on one after it (the directory's sync),
// path holds the new file, which a crash may still undo. It returns the
// bytes written.
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
