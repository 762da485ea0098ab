package reset

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
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
)

// The removal of a device whose provider cannot disassociate (rxe, siw)
// blocks in the kernel until every user has closed the device: DELLINK, a
// driver unbind and the netdev unregistration an unbind triggers wait
// uninterruptibly. A thread stuck there keeps its process from exiting, so
// Run carries out the reset in a helper process of its own session
// (Options.Helper, which runs RunHelper) and waits for it only up to the
// timeout; the helper then finishes the reset by itself once the users are
// gone, or can be killed to abandon it.

// Step is what the helper carries out. JSON field names are its protocol
// with Run (the same binary).
type Step struct {
	Method Method `json:"method"`
	Device string `json:"device"`
	Index  uint32 `json:"index"`
	Kind   string `json:"kind"`   // "rxe", "siw" or "pci"
	Netdev string `json:"netdev"` // a software device's netdev
	PCI    string `json:"pci"`
	Driver string `json:"driver"`
	FLR    bool   `json:"flr"` // pci-reset: the function offers FLR
	// DevlinkBus and DevlinkDev name the devlink instance to reload;
	// DevDir is the device whose netdevs come back after it.
	DevlinkBus string `json:"devlink_bus"`
	DevlinkDev string `json:"devlink_dev"`
	DevDir     string `json:"dev_dir"`
	SysRoot    string `json:"sys_root"`
	// Wait bounds each wait after the removal (the netdev coming back, the
	// old device leaving).
	Wait time.Duration `json:"wait"`
}

// progress is one line the helper writes on its progress pipe.
type progress struct {
	Stage  string `json:"stage"` // "removed", "done", "failed"
	Netdev string `json:"netdev"`
	Error  string `json:"error"`
}

// Helper progress stages.
const (
	stageRemoved = "removed"
	stageDone    = "done"
	stageFailed  = "failed"
)

// RunHelper is the helper process's side: it reads a Step from in, carries
// it out and writes its progress as JSON lines to out (best effort: Run may
// have returned). It logs to log.
func RunHelper(ctx context.Context, in io.Reader, out io.Writer, log *slog.Logger) error {
	var s Step
	if err := json.NewDecoder(in).Decode(&s); err != nil {
		return fmt.Errorf("reset: helper: read step: %w", err)
	}
	log = log.With("device", s.Device, "method", string(s.Method))
	enc := json.NewEncoder(out)
	say := func(p progress) {
		if err := enc.Encode(p); err != nil {
			log.Debug("progress not delivered", "stage", p.Stage, "err", err)
		}
	}
	netdev, err := runStep(ctx, s, log, func() { say(progress{Stage: stageRemoved}) })
	if err != nil {
		log.Error("reset failed", "err", err)
		say(progress{Stage: stageFailed, Error: err.Error(), Netdev: netdev})
		return err
	}
	log.Info("reset done", "netdev", netdev)
	say(progress{Stage: stageDone, Netdev: netdev})
	return nil
}

func runStep(ctx context.Context, s Step, log *slog.Logger, removed func()) (string, error) {
	c, err := rdmanl.Dial()
	if err != nil {
		return "", err
	}
	defer c.Close()
	dev := rdmanl.Device{Index: s.Index, Name: s.Device}
	switch s.Method {
	case MethodRelink:
		log.Info("removing the device")
		if err := c.LinkDelete(ctx, dev); err != nil {
			return "", err
		}
		removed()
		log.Info("adding it again", "netdev", s.Netdev)
		return s.Netdev, c.LinkAdd(ctx, s.Device, s.Kind, s.Netdev)
	case MethodDevlinkReload, MethodUnbind, MethodPCIReset:
		var nst netdevState
		soft := s.Kind == "rxe" || s.Kind == "siw"
		if soft {
			if nst, err = readNetdev(s.Netdev); err != nil {
				return "", err
			}
		}
		netdevs := func() ([]string, error) { return sysfs.PCINetdevs(s.SysRoot, s.PCI) }
		if s.Method == MethodDevlinkReload {
			h := devlinkHandle{bus: s.DevlinkBus, dev: s.DevlinkDev}
			log.Info("reloading the driver through devlink", "devlink", h.String())
			if err := devlinkReload(h); err != nil {
				return "", err
			}
			netdevs = func() ([]string, error) { return netdevsIn(s.DevDir) }
		} else {
			log.Info("unbinding the PCI function", "pci", s.PCI, "driver", s.Driver)
			if err := unbindPCI(s.SysRoot, s.PCI, s.Driver); err != nil {
				return "", err
			}
		}
		removed()
		if s.Method == MethodPCIReset {
			log.Info("resetting the PCI function", "pci", s.PCI, "flr", s.FLR)
			if err := resetPCI(s.SysRoot, s.PCI, s.FLR); err != nil {
				// Bind it again all the same: an unbound function is
				// worse than one that missed its reset.
				if berr := bindPCI(s.SysRoot, s.PCI, s.Driver); berr != nil {
					return "", errors.Join(err, berr)
				}
				return "", err
			}
		}
		if s.Method != MethodDevlinkReload {
			log.Info("binding the PCI function", "pci", s.PCI, "driver", s.Driver)
			if err := bindPCI(s.SysRoot, s.PCI, s.Driver); err != nil {
				return "", err
			}
		}
		if !soft {
			return "", nil
		}
		netdev, err := waitNetdev(ctx, netdevs, s.Wait)
		if err != nil {
			return "", err
		}
		log.Info("restoring the netdev", "netdev", netdev, "name", nst.Name)
		if err := restoreNetdev(netdev, nst); err != nil {
			return netdev, err
		}
		// The provider removes its device when its netdev goes away;
		// the name is free once that is done.
		if err := waitGone(ctx, c, s.Device, s.Wait); err != nil {
			return nst.Name, err
		}
		log.Info("adding the software device again", "netdev", nst.Name)
		return nst.Name, c.LinkAdd(ctx, s.Device, s.Kind, nst.Name)
	}
	return "", fmt.Errorf("reset: helper: method %q is not carried out by the helper", s.Method)
}

// pollEvery is how often the helper and Run look again at sysfs, netlink
// and /proc for a state no event announces to them: a netdev appearing on
// a PCI function (a uevent, which needs a netlink socket of its own and
// udev's ordering), a process closing a file (fanotify would see only the
// device node it marks, not a container's own node for the same device).
const pollEvery = 50 * time.Millisecond

// netdevsIn lists the netdevs of the device directory dir (dir/net).
func netdevsIn(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "net"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

// waitNetdev waits for a netdev to appear in what list returns (after a
// bind or a reload).
func waitNetdev(ctx context.Context, list func() ([]string, error), limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		names, err := list()
		if err != nil {
			return "", err
		}
		if len(names) > 0 {
			return names[0], nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("reset: wait for the netdev to return: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// waitGone waits until netlink no longer lists a device called name.
func waitGone(ctx context.Context, c *rdmanl.Client, name string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		_, err := c.Device(ctx, name)
		if errors.Is(err, rdmanl.ErrNoDevice) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reset: wait for %s to leave: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// helperProc is a started helper.
type helperProc struct {
	pid      int
	logPath  string
	progress chan progress // closed when the pipe ends
	pipe     *os.File
}

// startHelper starts the helper in a session of its own with s on its
// stdin, its log in logDir, and its progress on a pipe.
func startHelper(argv []string, s Step, logDir string) (*helperProc, error) {
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return nil, fmt.Errorf("reset: helper log directory: %w", err)
	}
	logPath := filepath.Join(logDir, fmt.Sprintf("reset-%s-%s.log", s.Device, time.Now().UTC().Format("20060102T150405.000")))
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("reset: helper log: %w", err)
	}
	defer logf.Close() //nolint:errcheck // the helper writes it, not this process
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("reset: helper pipe: %w", err)
	}
	defer pw.Close() //nolint:errcheck // the helper holds the write end
	step, err := json.Marshal(s)
	if err != nil {
		_ = pr.Close() // that error is returned
		return nil, err
	}
	stdin, err := os.CreateTemp("", "rdmatool-reset-step-*")
	if err != nil {
		_ = pr.Close() // that error is returned
		return nil, fmt.Errorf("reset: helper step file: %w", err)
	}
	defer stdin.Close()     //nolint:errcheck // the step was written whole or its error returned
	os.Remove(stdin.Name()) // the open file stays readable
	if _, err := stdin.Write(step); err != nil {
		_ = pr.Close() // that error is returned
		return nil, fmt.Errorf("reset: helper step file: %w", err)
	}
	if _, err := stdin.Seek(0, io.SeekStart); err != nil {
		_ = pr.Close() // that error is returned
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, logf, logf
	cmd.ExtraFiles = []*os.File{pw} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = pr.Close() // that error is returned
		return nil, fmt.Errorf("reset: start helper %s: %w", argv[0], err)
	}
	h := &helperProc{pid: cmd.Process.Pid, logPath: logPath, progress: make(chan progress, 8), pipe: pr}
	// Reap it if it ends while Run still waits; Run does not wait for it
	// beyond the timeout: it is left to finish, and init reaps it.
	go func() { _ = cmd.Wait() }() // its outcome comes over the pipe
	go func() {
		defer close(h.progress)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var p progress
			if json.Unmarshal(sc.Bytes(), &p) == nil {
				h.progress <- p
			}
		}
	}()
	return h, nil
}

// HelperProgressFD is the file descriptor the helper writes its progress
// to.
const HelperProgressFD = 3
