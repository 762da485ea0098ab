// Command rdmatool finds leaked RDMA queue pairs, traces their lifecycle on
// ib_core, lists RDMA devices and resources, renames devices by node GUID,
// and resets devices in bounded time. See README.md.
//
// # Errors
//
// Every package of rdmatool returns errors that read "pkg: op object:
// cause" in lower case ("rdmanl: dump QPs of rxe0: operation not
// permitted"), wrapping the cause with %w so that errors.Is finds
// os.ErrPermission, os.ErrNotExist and the packages' sentinels; an error
// wrapped by another package gets that package's prefix in front of its
// own. Library errors carry no CLI words (flag names, hints). The command
// prints an error once, on one line on stderr after "rdmatool: " (control
// characters escaped), and adds the hint that matches its cause:
// CAP_NET_ADMIN for a netlink request the kernel refused, CAP_BPF and
// CAP_PERFMON for the probes, for a kernel without RDMA netlink or with
// ib_core unloaded what the kernel has of ib_core (a module to load, none
// at all), --no-agent when the agent refused a question.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/spf13/cobra"
)

// version is stamped by the linker (-X main.version=...); it is never written
// at run time.
var version = "dev"

// Exit statuses, as documented in rdmatool(8) (rdmatool docs man).
const (
	exitOK          = 0   // success; for checks: nothing found
	exitFindings    = 1   // a check reported findings
	exitError       = 2   // bad usage, permission, kernel or I/O failure, timeout
	exitInterrupted = 130 // SIGINT or SIGTERM
)

// errFindings is returned by check commands that printed findings.
var errFindings = errors.New("findings reported")

func main() {
	// RDMATOOL_CPUPROFILE=FILE writes a CPU profile, for benchmarks in the
	// lab; a profile that cannot be made is said on stderr, and the
	// command runs without it.
	if path := os.Getenv("RDMATOOL_CPUPROFILE"); path != "" {
		f, err := createProfile(path)
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				_ = f.Close() // the profile's error is reported
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "rdmatool: cpu profile:", err)
		} else {
			code := run(os.Args[1:], os.Stdout, os.Stderr)
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "rdmatool: cpu profile:", err)
			}
			os.Exit(code)
		}
	}
	// RDMATOOL_HEAPPROFILE=PREFIX writes heap profiles, for the agent's soak
	// in the lab: PREFIX.N on the Nth SIGUSR1, PREFIX.exit at the end.
	// RDMATOOL_CPUWINDOWS=PREFIX writes CPU profiles of windows the lab's
	// bench chooses (the agent at idle): PREFIX.N from the (2N-1)th
	// SIGUSR2 to the 2Nth.
	var stops []func()
	if prefix := os.Getenv("RDMATOOL_HEAPPROFILE"); prefix != "" {
		stops = append(stops, heapProfiles(prefix))
	}
	if prefix := os.Getenv("RDMATOOL_CPUWINDOWS"); prefix != "" {
		stops = append(stops, cpuWindows(prefix))
	}
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	for _, stop := range stops {
		stop()
	}
	os.Exit(code)
}

// createProfile creates (or empties) the regular file at path for a
// profile. A symbolic link there is refused, not followed (a profile must
// not empty the file it points to), and so is anything else that is not a
// regular file (a pipe without a reader fails rather than blocks).
func createProfile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close() // refused
		if err == nil {
			err = fmt.Errorf("%s: not a regular file", path)
		}
		return nil, err
	}
	return f, nil
}

// cpuWindows profiles the CPU from one SIGUSR2 to the next, into
// PREFIX.N for the Nth window, until the returned function is called
// (which ends a window still open). A file appears whole (written beside
// it and renamed) when its window ends; a failure is reported on stderr
// only, as this is a measurement aid.
func cpuWindows(prefix string) (stop func()) {
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var f *os.File
		end := func() {
			pprof.StopCPUProfile()
			err := f.Close()
			if err == nil {
				err = os.Rename(f.Name(), strings.TrimSuffix(f.Name(), ".part"))
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "rdmatool: cpu profile:", err)
			}
			f = nil
		}
		for n := 1; ; {
			if _, ok := <-usr2; !ok {
				if f != nil {
					end()
				}
				return
			}
			if f != nil {
				end()
				n++
				continue
			}
			var err error
			if f, err = createProfile(fmt.Sprintf("%s.%d.part", prefix, n)); err == nil {
				if err = pprof.StartCPUProfile(f); err != nil {
					_ = f.Close()
					f = nil
				}
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "rdmatool: cpu profile:", err)
			}
		}
	}()
	return func() {
		signal.Stop(usr2)
		close(usr2)
		<-done
	}
}

// heapProfiles writes a heap profile to PREFIX.N on the Nth SIGUSR1 until
// the returned function is called, which writes PREFIX.exit. Each profile
// follows a garbage collection, so its in-use figures are what is live.
func heapProfiles(prefix string) (stop func()) {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 1; ; n++ {
			if _, ok := <-usr1; !ok {
				return
			}
			writeHeapProfile(fmt.Sprintf("%s.%d", prefix, n))
		}
	}()
	return func() {
		signal.Stop(usr1)
		close(usr1)
		<-done
		writeHeapProfile(prefix + ".exit")
	}
}

// writeHeapProfile writes the heap profile to path, whole when it appears
// (written beside it and renamed: the bench stops the agent once the file
// is there); a failure is reported on stderr only, as this is a
// measurement aid.
func writeHeapProfile(path string) {
	runtime.GC()
	f, err := createProfile(path + ".part")
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(path+".part", path)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdmatool: heap profile:", err)
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	return runRoot(newRootCmd(), args, stdout, stderr)
}

// runRoot runs a command tree with args until SIGINT or SIGTERM.
func runRoot(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runRootContext(ctx, root, args, stdout, stderr)
}

// runRootContext runs a command tree with args under ctx.
func runRootContext(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	if args == nil {
		args = []string{} // not cobra's "nil: os.Args"
	}
	// "--" before the command ends the options and leaves no command
	// (cobra would suggest the command that follows it, as typed).
	for _, a := range args {
		if a == "--" {
			return exitCode(ctx, errors.New(`"--" before the command: the command comes first (rdmatool COMMAND [ARGS])`), stderr)
		}
		if !strings.HasPrefix(a, "-") {
			break
		}
	}
	root.SetArgs(args)
	out := &checkedWriter{w: stdout}
	root.SetOut(out)
	root.SetErr(stderr)
	strictDefaults(root, args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		err = strayArgs(cmd)
	}
	if err == nil && out.err != nil { // help, docs, completion: cobra writes them unchecked
		err = fmt.Errorf("write the output: %w", out.err)
	}
	return exitCode(ctx, err, stderr)
}

// checkedWriter keeps the first error of the writes to w: output that
// did not all go out (stdout on a full disk, /dev/full) is an error, also
// where cobra writes it (help, usage, completion) without looking.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// exitCode prints err once and maps it to the exit status.
func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errFindings):
		return exitFindings
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "rdmatool: interrupted")
		return exitInterrupted
	}
	// One line, whatever the error quotes: what was typed, a name from
	// the kernel or a file.
	fmt.Fprintln(stderr, "rdmatool:", quote.Text(userMessage(err, hostIBCore)))
	return exitError
}
