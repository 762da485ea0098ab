// Command vmlab builds the rdmatool lab images and runs commands and Go test
// binaries inside them.
//
//	vmlab build [-kernel NAME|all] [-system] [-refresh]
//	vmlab run   [-kernel NAME] [-system] [-timeout D] [-share DIR]... [-one-thread] [-host-cpus N] [-times FILE] -- COMMAND [ARG...]
//	vmlab exec  [-kernel NAME] [-system] [-timeout D] TESTBINARY [ARG...]   (go test -exec)
//	vmlab info  [-kernel NAME]
//	vmlab jobs  [run's flags] JOBFILE
//	vmlab times [-top N] DIR
//	vmlab kernels
//
// Guests share the machine's host CPUs by a budget (-host-cpus, default
// all of them): a guest takes one CPU for each host thread that runs its
// vCPUs (one under single-threaded TCG: -one-thread, or a kernel that
// needs it) and waits while they are taken. jobs runs the guest runs a
// file lists, a line each ("LOG KERNEL GUEST [KEY=VALUE]... COMMAND
// [ARG]...", GUEST lab or system, lab/1 or system/1 on one host thread),
// in its order and as many at once as the budget holds, each
// one's output in LOG and its status in LOG.status, their ok/FAIL lines
// printed as they come. run -times FILE (and jobs) appends what a run
// cost; times DIR prints the lab's time table from DIR/times and
// the guests' logs there (DIR/KERNEL.log or DIR/KERNEL-GROUP.log,
// vmtest/labtests.sh's or vmtest/systemtests.sh's output): each guest
// run's queue, wall, boot and QEMU CPU time, each package's time and
// guest CPU use per kernel, the slowest tests.
//
// -system builds or boots the system guest: a Debian root disk with systemd
// (docs/lab.md) on the same kernels.
//
// Kernels, userspace and run directories are cached in $VMTEST_CACHE, else
// $XDG_CACHE_HOME/rdmatool-lab (~/.cache/rdmatool-lab), so fresh clones of the
// repository reuse them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmatool/rdmatool/vmtest/internal/lab"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmlab:", err)
		if code == 0 {
			code = 3
		}
	}
	os.Exit(code)
}

const usage = `usage:
  vmlab build   [-kernel NAME|all] [-system] [-refresh]
  vmlab run     [-kernel NAME] [-system] [-timeout D] [-share DIR]... [-one-thread] [-host-cpus N] [-times FILE] -- COMMAND [ARG...]
  vmlab exec    [-kernel NAME] [-system] [-timeout D] TESTBINARY [ARG...]
  vmlab info    [-kernel NAME]
  vmlab jobs    [-timeout D] [-one-thread] [-host-cpus N] [-times FILE] JOBFILE
  vmlab times   [-top N] DIR
  vmlab kernels`

func run(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New(usage)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	root, err := moduleRoot()
	if err != nil {
		return 2, err
	}
	cache, err := cacheDir()
	if err != nil {
		return 2, err
	}
	b := &lab.Builder{Cache: cache, Log: log}

	fs := flag.NewFlagSet("vmlab "+args[0], flag.ContinueOnError)
	kernel := fs.String("kernel", envOr("VMTEST_KERNEL", "6.12"), "kernel of the matrix: 6.1, 6.12, 7.x (build: also all)")
	timeout := fs.Duration("timeout", 10*time.Minute, "time limit for the whole guest run")
	refresh := fs.Bool("refresh", false, "resolve and fetch again even if cached")
	memory := fs.String("memory", "2G", "guest memory")
	icount := fs.Int("icount", envInt("VMTEST_ICOUNT"), "run: count instructions for guest time (QEMU -icount shift=N, e.g. 2; benchmarks)")
	keep := fs.Bool("keep", false, "keep the run directory with console.log")
	system := fs.Bool("system", false, "the system guest (systemd on a Debian root disk) instead of the initramfs guest")
	oneThread := fs.Bool("one-thread", false, "run: the vCPUs on one host thread (single-threaded TCG), taking one CPU of the lab's budget")
	cpus := fs.Int("host-cpus", envInt("VMTEST_HOST_CPUS"), "run: the lab's budget of host CPUs, shared by every guest on the machine (default: all)")
	timesFile := fs.String("times", "", "run: append what the run cost (queued, wall, boot, QEMU CPU time) to this file, a line of tab-separated fields")
	top := fs.Int("top", 20, "times: how many of the slowest tests to list")
	var shares multiFlag
	fs.Var(&shares, "share", "host directory to mount at the same path in the guest (repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2, err
	}
	b.Refresh = *refresh

	// guestSpec is what run, exec and each of jobs boot: command in a
	// guest of kernel, with this vmlab's flags.
	guestSpec := func(ctx context.Context, b *lab.Builder, kernel string, system bool, command []string, cwd string) (lab.RunSpec, error) {
		img, err := image(b, kernel)
		if err != nil {
			return lab.RunSpec{}, err
		}
		spec := lab.RunSpec{
			Image: img, Command: command, Dir: cwd,
			Shares: append([]string{root}, shares...), Timeout: *timeout,
			Memory: *memory, RunDir: filepath.Join(cache, "runs"), Keep: *keep, ICount: *icount,
			Env: passEnv(os.Environ()), OneThread: *oneThread, HostCPUs: *cpus,
		}
		if *icount > 0 { // the guest's scripts say which clock they measured
			spec.Env = append(slices.DeleteFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, "VMTEST_ICOUNT=") }),
				"VMTEST_ICOUNT="+strconv.Itoa(*icount))
		}
		if system {
			sys, err := b.System(ctx, img)
			if err != nil {
				return lab.RunSpec{}, err
			}
			spec.System = &sys
		}
		return spec, nil
	}

	switch args[0] {
	case "times":
		if fs.NArg() != 1 {
			return 2, errors.New(usage)
		}
		var kernels []string
		for _, k := range lab.Matrix {
			kernels = append(kernels, k.Name)
		}
		if err := times(os.Stdout, fs.Arg(0), kernels, *top); err != nil {
			return 1, err
		}
		return 0, nil
	case "kernels":
		for _, k := range lab.Matrix {
			fmt.Println(k.Name)
		}
		return 0, nil
	case "build":
		kernels := lab.Matrix
		if *kernel != "all" {
			k, err := lab.LookupKernel(*kernel)
			if err != nil {
				return 2, err
			}
			kernels = []lab.Kernel{k}
		}
		for _, k := range kernels {
			img, err := b.Build(ctx, k)
			if err != nil {
				return 1, err
			}
			fmt.Printf("%s\t%s\t%s\n", k.Name, img.Release, img.Version)
			if *system {
				sys, err := b.System(ctx, img)
				if err != nil {
					return 1, err
				}
				fmt.Printf("%s\tsystem\t%s\n", k.Name, sys.Root)
			}
		}
		return 0, nil
	case "info":
		img, err := image(b, *kernel)
		if err != nil {
			return 1, err
		}
		out, _ := json.MarshalIndent(img, "", "  ")
		fmt.Println(string(out))
		return 0, nil
	case "jobs":
		if fs.NArg() != 1 {
			return 2, errors.New(usage)
		}
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return 2, err
		}
		jobs, err := parseJobs(f)
		_ = f.Close() // read only
		if err != nil {
			return 2, fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
		cwd, err := os.Getwd()
		if err != nil {
			return 2, err
		}
		start := func(j job) (lab.RunSpec, error) {
			spec, err := guestSpec(ctx, b, j.kernel, j.system, j.command, cwd)
			spec.Env = append(spec.Env, j.env...)
			spec.OneThread = spec.OneThread || j.oneThread
			return spec, err
		}
		failed := runJobs(ctx, jobs, start, lab.Budget(*cpus), *timesFile, os.Stdout)
		if len(failed) > 0 {
			var logs []string
			for _, j := range failed {
				logs = append(logs, j.log)
			}
			return 1, fmt.Errorf("%d of %d guest runs failed: %s", len(failed), len(jobs), strings.Join(logs, " "))
		}
		return 0, nil
	case "run", "exec":
		command := fs.Args()
		if len(command) == 0 {
			return 2, errors.New(usage)
		}
		cwd, err := os.Getwd()
		if err != nil {
			return 2, err
		}
		spec, err := guestSpec(ctx, b, *kernel, *system, command, cwd)
		if err != nil {
			return 1, err
		}
		spec.Stdout = os.Stdout
		spec.Stats = &lab.RunStats{}
		if args[0] == "exec" {
			bin, err := filepath.Abs(command[0])
			if err != nil {
				return 2, err
			}
			spec.Command[0] = bin
			spec.Shares = append(spec.Shares, filepath.Dir(bin))
		}
		status, err := lab.Run(ctx, spec)
		if spec.Stats.Boots > 0 {
			guest := "lab"
			if *system {
				guest = "system"
			}
			report(os.Stderr, *kernel, guest, spec.Stats, status, err, *timesFile)
		}
		return status, err
	}
	return 2, fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

// report prints what a run cost to w and, with a file, appends it
// there: kernel, guest, host threads, then queued, wall, boot and CPU in
// seconds, boots, the command's status ("error" when the guest did not
// report one).
func report(w io.Writer, kernel, guest string, st *lab.RunStats, status int, err error, file string) {
	busy := 0.0
	if st.Wall > 0 && st.Threads > 0 {
		busy = 100 * st.CPU.Seconds() / (st.Wall.Seconds() * float64(st.Threads))
	}
	fmt.Fprintf(w, "vmlab: %s %s guest: %s (boot %s, queued %s for %d host CPUs), QEMU CPU %s: %.0f%% of its %d host threads\n",
		kernel, guest, st.Wall.Round(time.Second), st.Boot.Round(time.Second), st.Queued.Round(time.Second), st.Threads,
		st.CPU.Round(time.Second), busy, st.Threads)
	if file == "" {
		return
	}
	result := strconv.Itoa(status)
	if err != nil {
		result = "error"
	}
	f, ferr := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if ferr == nil {
		_, ferr = fmt.Fprintf(f, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%s\n", kernel, guest, st.Threads,
			st.Queued.Seconds(), st.Wall.Seconds(), st.Boot.Seconds(), st.CPU.Seconds(), st.Boots, result)
		if cerr := f.Close(); ferr == nil {
			ferr = cerr
		}
	}
	if ferr != nil {
		fmt.Fprintln(w, "vmlab: times:", ferr)
	}
}

func image(b *lab.Builder, name string) (lab.Image, error) {
	k, err := lab.LookupKernel(name)
	if err != nil {
		return lab.Image{}, err
	}
	img, ok := b.Cached(k)
	if !ok {
		return lab.Image{}, fmt.Errorf("kernel %s: %w", name, lab.ErrNotBuilt)
	}
	return img, nil
}

// passEnv keeps the variables a test binary reads: Go's own (GOCOVERDIR,
// GODEBUG, GOTRACEBACK), the lab's and rdmatool's.
func passEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "VMTEST_KERNEL" || k == "VMTEST_CACHE" {
			continue // the guest sets its own
		}
		for _, p := range []string{"GO", "VMTEST_", "RDMATOOL_"} {
			if strings.HasPrefix(k, p) && k != "GOROOT" && k != "GOPATH" {
				out = append(out, kv)
				break
			}
		}
	}
	return out
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return lab.ModuleRoot(dir)
}

func cacheDir() (string, error) {
	if c := os.Getenv("VMTEST_CACHE"); c != "" {
		return filepath.Abs(c)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "rdmatool-lab"), nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// envInt is the number in environment variable k, 0 when unset or not one.
func envInt(k string) int {
	n, _ := strconv.Atoi(os.Getenv(k))
	return n
}
