package watch

import (
	"encoding/binary"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"

	"github.com/rdmatool/rdmatool/bpf"
	"github.com/rdmatool/rdmatool/internal/procmaps"
	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/symbolize"
)

// Sites names the creation sites of probe events at event time, while the
// creating process still runs: a user QP's call site through /proc/PID
// (symbolize.User), a kernel QP's stack through kallsyms, read when the
// first kernel QP comes. Both cache what they read, so the QPs of one
// site cost one lookup of its mapping. It is not safe for concurrent use.
type Sites struct {
	log         *slog.Logger
	user        *symbolize.User
	procRoot    string
	kernel      *symbolize.Kernel
	kernelTried bool
	// kernelErr is why kernel stacks are shown as addresses ("" when
	// they are not, or no kernel QP came yet).
	kernelErr string
	// calls holds the named calls above user sites by process and stack:
	// a process's creates from one code path share them (maxCallStacks).
	calls map[callsKey][]string
}

// callsKey is a process and a hash of the return addresses of a user stack.
type callsKey struct {
	pid  uint32
	hash uint64
}

// maxCallStacks bounds Sites.calls; it is emptied when full.
const maxCallStacks = 4096

// NewSites returns a Sites that reads procRoot (normally /proc).
func NewSites(log *slog.Logger, procRoot string) *Sites {
	return &Sites{log: log, user: symbolize.NewUser(procRoot), procRoot: procRoot}
}

// Site returns where ev's QP was created (a failed create's too);
// nothing for other events or when the probes did not see it. A process
// that is gone, or a file that cannot be read, leaves what could be found
// (a Call of "?" at worst).
func (c *Sites) Site(ev *bpf.Event) leakwatch.Site {
	switch {
	case ev.Kind != bpf.KindQPCreate:
		return leakwatch.Site{}
	case ev.Via != "":
		s, err := c.user.CallSite(ev.PID, ev.ViaReturn, ev.ViaMapping)
		if err != nil {
			c.log.Debug("creation site not symbolized", "pid", ev.PID, "err", err)
		}
		site := leakwatch.Site{Call: s.String(), Via: ev.Via, File: s.Path, BuildID: s.BuildID, Offset: s.Offset}
		if err == nil {
			site.Stack = c.userFrames(ev.PID, ev.UserStack)
		}
		return site
	case ev.Stack != nil:
		return leakwatch.Site{Stack: c.frames(ev.Stack, ev.Probe)}
	}
	return leakwatch.Site{}
}

// maxUserFrames bounds the frames above a user call site that are named.
const maxUserFrames = 16

// userFrames names the return addresses above a user call site, each as
// the call before it, up to the first that is not in a file of the process
// (the end of the frame-pointer chain, or a chain a program without frame
// pointers made up): nil when there is none. A process's stack is named
// once: the names are kept by process and stack (a process that reuses
// the pid of one gone, with the very same addresses, gets its names).
func (c *Sites) userFrames(pid uint32, stack []uint64) []string {
	if len(stack) == 0 {
		return nil
	}
	h := fnv.New64a()
	var b [8]byte
	for _, ret := range stack {
		binary.LittleEndian.PutUint64(b[:], ret)
		h.Write(b[:])
	}
	key := callsKey{pid, h.Sum64()}
	if out, ok := c.calls[key]; ok {
		return out
	}
	out := c.nameFrames(pid, stack)
	if c.calls == nil || len(c.calls) >= maxCallStacks {
		c.calls = map[callsKey][]string{}
	}
	c.calls[key] = out
	return out
}

// nameFrames is userFrames without the cache.
func (c *Sites) nameFrames(pid uint32, stack []uint64) []string {
	var out []string
	for _, ret := range stack[:min(len(stack), maxUserFrames)] {
		s, err := c.user.CallSite(pid, ret, procmaps.Ident{})
		if err != nil || s.Path == "" || strings.HasPrefix(s.Path, "[") {
			break
		}
		out = append(out, s.String())
	}
	return out
}

// KernelErr says why kernel stacks are shown as addresses: kallsyms could
// not be read, or hides its addresses (symbolize.ErrRestricted); "" when
// they are named, or no kernel stack came yet.
func (c *Sites) KernelErr() string { return c.kernelErr }

// frames names a kernel stack's return addresses, leaving out the probe's
// own: the frames of BPF programs and trampolines, and a first frame in
// the probed function (where an fentry trampoline was called from).
func (c *Sites) frames(stack []uint64, probed string) []string {
	if !c.kernelTried {
		c.kernelTried = true
		var err error
		if c.kernel, err = symbolize.NewKernel(c.procRoot); err != nil {
			c.kernelErr = err.Error()
			c.log.Warn("kernel stacks shown as addresses", "err", err)
		}
	}
	out := []string{}
	for _, ret := range stack {
		if c.kernel == nil {
			out = append(out, "0x"+strconv.FormatUint(ret, 16))
			continue
		}
		s, err := c.kernel.Frame(ret)
		switch {
		case err != nil:
			out = append(out, "0x"+strconv.FormatUint(ret, 16))
		case s.Module == "bpf", len(out) == 0 && s.Symbol == probed:
		default:
			out = append(out, s.String())
		}
	}
	return out
}
